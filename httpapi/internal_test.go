package httpapi

import (
	"bytes"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

func TestDefaultAuthorizerWarnsOnce(t *testing.T) {
	var buf strings.Builder
	oldOut := warnOut
	warnOut, warnAllowAll = &buf, sync.Once{}
	t.Cleanup(func() { warnOut = oldOut })

	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	e := varplane.NewEngine(st, varplane.Options{})
	t.Cleanup(e.Close)
	for range 3 {
		h := NewHandler(e, Options{})
		h.Close()
		if h.auth == nil {
			t.Fatal("no authorizer")
		}
	}
	if got := strings.Count(buf.String(), "WARNING"); got != 1 {
		t.Errorf("warnings = %d (%q), want exactly 1", got, buf.String())
	}
	buf.Reset()
	h := NewHandler(e, Options{Authorizer: AllowAll})
	h.Close()
	if buf.Len() != 0 {
		t.Errorf("explicit AllowAll warned: %q", buf.String())
	}
}

// FuzzDecodeStrictFastPath checks that decodeStrict's fast path for valid
// JSON answers exactly as the token-by-token decoding does: the same error
// message, or the same decoded request.
func FuzzDecodeStrictFastPath(f *testing.F) {
	for _, s := range []string{
		`{"scope":"a.b","document":{"x":[1,{"y":"}"}]},"schemaId":"s/v1"}`,
		`{"scope":"a.b","revision":"r","expectedGeneration":0}`,
		`{"scope":"a.b","scope":"a.c"}`,
		`{"Scope":"a.b"}`,
		`{"sc\u006fpe":"a.b","document":1}`,
		`{"scope":5}`,
		`{"document":"\"\\"}`,
		` [1,2] `,
		`null`,
		`{"scope":"a.b"} {}`,
		`{"expectedGeneration":-1,"toGeneration":1e3}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		compare := func(fast, slow any) {
			errFast, errSlow := decodeStrict(body, fast), decodeStrictTokens(body, slow)
			if (errFast == nil) != (errSlow == nil) || (errFast != nil && errFast.Error() != errSlow.Error()) {
				t.Fatalf("%T: fast path says %v, token path %v", fast, errFast, errSlow)
			}
			if errFast == nil && !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%T: fast path decoded %+v, token path %+v", fast, fast, slow)
			}
		}
		if len(bytes.TrimSpace(body)) == 0 || !utf8.Valid(body) {
			return // answered before either path
		}
		compare(&createBody{}, &createBody{})
		compare(&validateBody{}, &validateBody{})
		compare(&activateBody{}, &activateBody{})
		compare(&deactivateBody{}, &deactivateBody{})
		compare(&rollbackBody{}, &rollbackBody{})
	})
}
