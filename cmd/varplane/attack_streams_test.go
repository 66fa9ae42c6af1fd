package main

// The attack suite's cases of issue 34 on the streams and the console
// sessions (items 2 and 4): each through the real server, checking the
// answer, that nothing stored changed, and the server's peak memory.

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// streamTarget is a server with access control on a file store: a
// bootstrapped administrator, two read-only identities of the tokens file
// (mallory, the attacker, and bea), and one live scope; what the log held
// before the attack.
type streamTarget struct {
	*server
	log, admin string
	before     []byte
	history    []byte
}

const (
	malloryToken = "mallory-read-token"
	beaToken     = "bea-read-token"
)

func startStreamTarget(t *testing.T, args ...string) *streamTarget {
	t.Helper()
	log := filepath.Join(t.TempDir(), "var-log.jsonl")
	r := runCLI(t, nil, "", "migrate", "bootstrap", "--to", "file:"+log, "--admin", "ops")
	admin := tokenRE.FindStringSubmatch(r.stdout)
	if r.code != 0 || admin == nil {
		t.Fatalf("bootstrap: %d %s %s", r.code, r.stdout, r.stderr)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tokens": malloryToken + " id=mallory kinds=read\n" + beaToken + " id=bea kinds=read\n"})
	s := startServer(t, append([]string{"--store", "file:" + log, "--access-control", "--tokens", filepath.Join(dir, "tokens")}, args...)...)
	auth := []string{"Authorization", "Bearer " + admin[1]}
	expect(t, call(t, "POST", s.Base+"/admin/publish", map[string]any{"scope": "safe.scope", "document": map[string]any{"v": 1}, "expectedGeneration": 0}, auth...), 200, "")
	before, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return &streamTarget{server: s, log: log, admin: admin[1], before: before,
		history: call(t, "GET", s.Base+"/admin/history?scope=safe.scope", nil, auth...).body}
}

// unchanged fails when the log changed (whole: logChanged false) or the
// live scope's history changed.
func (a *streamTarget) unchanged(t *testing.T, wholeLog bool) {
	t.Helper()
	after, err := os.ReadFile(a.log)
	if err != nil {
		t.Fatal(err)
	}
	if wholeLog && !bytes.Equal(after, a.before) {
		t.Fatalf("the attack reached the log:\n%.300s", after[len(a.before):])
	}
	if h := call(t, "GET", a.Base+"/admin/history?scope=safe.scope", nil, "Authorization", "Bearer "+a.admin).body; !bytes.Equal(h, a.history) {
		t.Fatalf("history changed:\n%s", h)
	}
}

func grpcClient(t *testing.T, root string) v1.PushServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(strings.TrimPrefix(root, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return v1.NewPushServiceClient(cc)
}

// TestAttackWatchStreamsWithoutWatches: 3,000 gRPC Watch streams over 12
// connections, each sending one progress request and never a create, half
// of them without a token. The server this replaced kept every one open
// (6,000 held 30,000 goroutines and 400 MB for ever); now those without a
// token are refused Unauthenticated before they are read, the others end
// DeadlineExceeded after --grpc-request-timeout, the server's peak RSS
// stays under the suite's bound and nothing is stored.
func TestAttackWatchStreamsWithoutWatches(t *testing.T) {
	a := startStreamTarget(t, "--grpc-request-timeout", "1s")
	clients := make([]v1.PushServiceClient, 12)
	for i := range clients {
		clients[i] = grpcClient(t, a.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	progress := &v1.WatchRequest{Request: &v1.WatchRequest_Progress{Progress: &v1.WatchProgressRequest{}}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ended := map[codes.Code]int{}
	start := time.Now()
	for i := range 3000 {
		sctx := ctx
		if i%2 == 0 {
			sctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+malloryToken)
		}
		w, err := clients[i%len(clients)].Watch(sctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = w.Send(progress)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := w.Recv(); err != nil {
					mu.Lock()
					ended[status.Code(err)]++
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("3,000 streams ended in %v: %v", took.Round(time.Millisecond), ended)
	if took > 45*time.Second {
		t.Errorf("the streams lasted until the client's own deadline: the server did not end them")
	}
	if ended[codes.Unauthenticated] != 1500 || ended[codes.DeadlineExceeded] != 1500 {
		t.Errorf("endings %v, want 1,500 Unauthenticated and 1,500 DeadlineExceeded", ended)
	}
	a.unchanged(t, true)
	a.checkRSS(t)
}

// TestAttackStreamCaps: one address opening watch streams past
// --max-subscribers-per-addr is answered 503 too-many-subscribers (limit
// max-subscribers-per-addr) while the streams it holds go on, and nothing
// is stored.
func TestAttackStreamCaps(t *testing.T) {
	a := startStreamTarget(t, "--max-subscribers-per-addr", "40")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func() *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "GET", a.Base+"/watch?key=safe.scope", nil)
		req.Header.Set("Authorization", "Bearer "+malloryToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	for i := range 40 {
		if resp := open(); resp.StatusCode != 200 {
			t.Fatalf("stream %d: %d", i, resp.StatusCode)
		}
	}
	for range 200 {
		resp := open()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 503 || !bytes.Contains(body, []byte(`"code":"too-many-subscribers"`)) || !bytes.Contains(body, []byte("max-subscribers-per-addr")) {
			t.Fatalf("a stream past the cap: %d %s", resp.StatusCode, body)
		}
	}
	a.unchanged(t, true)
	a.checkRSS(t)
}

// TestAttackRevokedTokenStreams: a principal revoked through the access API
// loses its open SSE watch (a close event, reason revoked) and its gRPC
// watch (canceled, forbidden) at once; the stored scope is untouched.
func TestAttackRevokedTokenStreams(t *testing.T) {
	a := startStreamTarget(t)
	env := []string{"VARPLANE_SERVER=" + a.URL, "VARPLANE_TOKEN=" + a.admin}
	r := runCLI(t, env, "", "token", "create", "--id", "leaver", "--kinds", "read")
	tok := tokenRE.FindStringSubmatch(r.stdout)
	if r.code != 0 || tok == nil {
		t.Fatalf("token create: %d %s %s", r.code, r.stdout, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.Base+"/watch?key=safe.scope", nil)
	req.Header.Set("Authorization", "Bearer "+tok[1])
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("watch: %v %v", resp, err)
	}
	defer resp.Body.Close()
	w, err := grpcClient(t, a.URL).Watch(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok[1]))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: &v1.WatchCreateRequest{WatchId: 1, Keys: []string{"safe.scope"}}}}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // created, then the snapshot
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if r := runCLI(t, env, "", "token", "revoke", "leaver"); r.code != 0 {
		t.Fatalf("token revoke: %d %s %s", r.code, r.stdout, r.stderr)
	}
	sc := bufio.NewScanner(resp.Body)
	var got strings.Builder
	for sc.Scan() {
		got.WriteString(sc.Text() + "\n")
	}
	if !strings.Contains(got.String(), "event: close") || !strings.Contains(got.String(), `"reason":"revoked"`) {
		t.Fatalf("the SSE watch of a revoked token (err %v):\n%s", sc.Err(), got.String())
	}
	for {
		m, err := w.Recv()
		if err != nil {
			t.Fatalf("the gRPC watch of a revoked token ended without its cancel: %v", err)
		}
		if m.GetCanceled() {
			if m.GetWatchId() != 1 || m.GetCancelCode() != "forbidden" {
				t.Fatalf("cancel %v, want watch 1 forbidden", m)
			}
			break
		}
	}
	a.unchanged(t, false) // the revocation itself is stored; the scope is not touched
	a.checkRSS(t)
}

var consoleCSRF = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// consoleBrowser is a cookie-keeping client of the console that does not
// follow redirects.
type consoleBrowser struct {
	t    *testing.T
	root string
	c    *http.Client
}

func newConsoleBrowser(t *testing.T, root string) *consoleBrowser {
	jar, _ := cookiejar.New(nil)
	return &consoleBrowser{t: t, root: root, c: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *consoleBrowser) do(method, path string, form url.Values) (int, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, b.root+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func (b *consoleBrowser) signin(token string) int {
	b.t.Helper()
	_, page := b.do("GET", "/ui/signin", nil)
	m := consoleCSRF.FindStringSubmatch(page)
	if m == nil {
		b.t.Fatalf("no CSRF token on the sign-in page:\n%.500s", page)
	}
	code, _ := b.do("POST", "/ui/signin", url.Values{"csrf": {m[1]}, "token": {token}, "next": {"/ui/"}})
	return code
}

// TestAttackConsoleSigninFlood: a read-only identity signs in 1,030 times
// (once more than the table held when one identity's sign-ins evicted the
// oldest session of anyone); another identity's session stays valid, and
// nothing is stored.
func TestAttackConsoleSigninFlood(t *testing.T) {
	a := startStreamTarget(t)
	victim := newConsoleBrowser(t, a.URL)
	if code := victim.signin(beaToken); code != http.StatusSeeOther {
		t.Fatalf("victim's sign-in: %d", code)
	}
	attacker := newConsoleBrowser(t, a.URL)
	for i := range 1030 {
		if code := attacker.signin(malloryToken); code != http.StatusSeeOther {
			t.Fatalf("sign-in %d: %d", i, code)
		}
	}
	if code, _ := victim.do("GET", "/ui/", nil); code != http.StatusOK {
		t.Fatalf("the victim's session after the flood: %d, want 200", code)
	}
	a.unchanged(t, true)
	a.checkRSS(t)
}

// TestAttackStreamBudget: with --stream-memory-bytes 128 MiB the server
// takes 128 MiB / push.SubscriptionCost subscriptions (2,048) and refuses
// the rest 503/Unavailable too-many-subscribers (max-subscribers); the
// memory the streams it holds cost stays within the stated budget.
func TestAttackStreamBudget(t *testing.T) {
	const budget = 128 << 20
	a := startStreamTarget(t, "--stream-memory-bytes", strconv.Itoa(budget), "--max-subscribers-per-token", "-1",
		"--max-subscribers-per-addr", "-1", "--max-subscribers-per-connection", "-1")
	want := budget / push.SubscriptionCost
	clients := make([]v1.PushServiceClient, 10)
	for i := range clients {
		clients[i] = grpcClient(t, a.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+malloryToken)
	before := a.memory(t, "VmRSS")
	held, refused := 0, 0
	for i := range want + 200 {
		s, err := clients[i%len(clients)].Subscribe(ctx, &v1.SubscribeRequest{Keys: []string{"safe.scope"}})
		if err == nil {
			_, err = s.Recv()
		}
		switch {
		case err == nil:
			held++
		case status.Code(err) == codes.Unavailable && strings.Join(s.Trailer().Get("varplane-code"), "") == "too-many-subscribers":
			refused++
		default:
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	grown := a.memory(t, "VmRSS") - before
	t.Logf("%d streams held, %d refused; RSS grew %d MiB (%d KiB a stream)", held, refused, grown>>20, grown/int64(max(held, 1))>>10)
	if held != want || refused != 200 {
		t.Errorf("held %d, refused %d; want %d and 200", held, refused, want)
	}
	if grown > budget {
		t.Errorf("the streams cost %d MiB, past the budget of %d MiB", grown>>20, budget>>20)
	}
	a.unchanged(t, true)
	a.checkRSS(t)
}
