package httpapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
)

// The plane as the top-level handler of its own server, under the default
// base /vars.
func ExampleNewHandler() {
	store := memory.New()
	defer store.Close()
	engine := varplane.NewEngine(store, varplane.Options{})
	defer engine.Close()

	tokens, _ := access.StaticTokens([]string{"dev-token"})
	h := httpapi.NewHandler(engine, httpapi.Options{Authorizer: tokens, Logger: slog.New(slog.DiscardHandler)})
	defer h.Close()

	srv := httpapi.NewServer("127.0.0.1:0", h)
	if err := srv.Open(); err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close(context.Background())

	post := func(path, body string) int {
		req, _ := http.NewRequest("POST", srv.URL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer dev-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Println(post("/vars/admin/revisions", `{"scope":"agentic.lanes.vinci","document":{"enabled":true}}`))
	fmt.Println(post("/vars/admin/deactivate", `{"scope":"agentic","expectedGeneration":7}`))
	// Output:
	// 201
	// 409
}

// The plane mounted inside an existing application's mux under /cnos/vars.
// Register both the bare base (reads are GET /cnos/vars?key=…) and the
// subtree; Base must be the mount point because the mux does not strip it.
func ExampleNewHandler_mounted() {
	store := memory.New()
	defer store.Close()
	engine := varplane.NewEngine(store, varplane.Options{})
	defer engine.Close()

	vars := httpapi.NewHandler(engine, httpapi.Options{
		Base:       "/cnos/vars",
		Authorizer: varplane.AllowAll,
		DisableOps: true, // the application serves its own /healthz
		Logger:     slog.New(slog.DiscardHandler),
	})
	defer vars.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "app ok") })
	mux.Handle(vars.Base(), vars)
	mux.Handle(vars.Base()+"/", vars)

	ctx := context.Background()
	res, _ := engine.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "agentic.lanes.vinci", Document: []byte(`{"enabled":true}`)})
	_, _ = engine.Activate(ctx, varplane.ActivateRequest{Scope: "agentic.lanes.vinci", Revision: res.Revision})

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/cnos/vars?key=agentic.lanes.vinci", nil))
	fmt.Println(rec.Code, rec.Header().Get("ETag") == `"`+string(res.Revision)+`"`)

	rec = httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/cnos/vars?key=agentic.lanes.vinci", nil)
	req.Header.Set("If-None-Match", string(res.Revision))
	mux.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	// Output:
	// 200 true
	// 304
}

// A tokens file gives each token its kinds and scope prefixes; the scoped
// authorizer enforces them.
func ExampleScoped() {
	grants, err := access.ParseTokens(strings.NewReader(`
# CI may do anything
ci-7f3a
# the lanes team reads everything and writes under agentic.
lanes-91c2 kinds=read,mutate prefixes=agentic. id=lanes-team
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	auth, _ := access.Scoped(grants)
	ctx := context.Background()
	for _, req := range []varplane.Access{
		{Kind: varplane.KindMutate, Scope: "agentic.lanes.vinci", Token: "lanes-91c2"},
		{Kind: varplane.KindMutate, Scope: "billing.eu", Token: "lanes-91c2"},
		{Kind: varplane.KindAudit, Scope: "agentic.lanes.vinci", Token: "lanes-91c2"},
		{Kind: varplane.KindAudit, Scope: "billing.eu", Token: "ci-7f3a"},
		{Kind: varplane.KindRead, Scope: "billing.eu"},
	} {
		verdict := "allowed"
		if _, err := auth.Authorize(ctx, req); err != nil {
			verdict = fmt.Sprint(httpapi.StatusCode(varplane.ErrorCode(err)), " ", varplane.ErrorCode(err))
		}
		fmt.Printf("%s %s: %s\n", req.Kind, req.Scope, verdict)
	}
	// Output:
	// mutate agentic.lanes.vinci: allowed
	// mutate billing.eu: 403 forbidden
	// audit agentic.lanes.vinci: 403 forbidden
	// audit billing.eu: allowed
	// read billing.eu: 401 unauthorized
}
