package file_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
)

// Issue 33 item 8 on the file store: a publish whose fdatasync fails after
// its write answers outcome-unknown through the engine (its bytes may
// reach the disk), never store-unavailable; from then on the store is not
// ready for writes and refuses them with store-unavailable (nothing is
// written), until it is reopened.
func TestWriteReadyAfterFailedSync(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s := mustOpen(t, path, file.Options{})
	if err := s.WriteReady(ctx); err != nil {
		t.Fatalf("a new store: WriteReady = %v", err)
	}
	e := varplane.NewEngine(s, varplane.Options{})
	defer e.Close()
	pub := func(expected varplane.Generation) error {
		_, err := e.Publish(ctx, varplane.PublishRequest{Scope: "app.k", Document: json.RawMessage(`{"v":1}`), ExpectedGeneration: expected, IdempotencyKey: "k1"})
		return err
	}
	file.SetSyncFunc(s, func() error { return errors.New("injected EIO") })
	if err := pub(0); !errors.Is(err, varplane.ErrOutcomeUnknown) {
		t.Fatalf("publish with a failing fdatasync: %v, want outcome-unknown", err)
	}
	err := s.WriteReady(ctx)
	if !errors.Is(err, varplane.ErrUnavailable) {
		t.Fatalf("after a failed fdatasync: WriteReady = %v, want store-unavailable", err)
	}
	if err := pub(0); !errors.Is(err, varplane.ErrUnavailable) {
		t.Errorf("a publish after the failure: %v, want store-unavailable", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteReady(ctx); !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("after Close: WriteReady = %v, want the store closed", err)
	}
	s = mustOpen(t, path, file.Options{})
	if err := varplane.WriteReady(ctx, s); err != nil {
		t.Errorf("reopened: WriteReady = %v", err)
	}
	e2 := varplane.NewEngine(s, varplane.Options{})
	defer e2.Close()
	if _, err := e2.Publish(ctx, varplane.PublishRequest{Scope: "app.k", Document: json.RawMessage(`{"v":1}`), IdempotencyKey: "k1"}); err != nil {
		t.Errorf("the publish repeated with its key after the restart: %v", err)
	}
}
