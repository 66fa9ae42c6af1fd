package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestAttackOFREP: the OpenFeature routes under hostile input, against the
// real binary on a file store with tokens: huge, deep and wide contexts
// are refused, forged tokens are refused before anything is read, and a
// flood of bulk evaluations of 8 MiB answers keeps the server's memory
// bounded (large answers are built four at a time); nothing stored
// changes.
func TestAttackOFREP(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(ofrepTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "var-log.jsonl")
	s := startServer(t, "--store", "file:"+logFile, "--tokens", tokens)
	admin := []string{"Authorization", "Bearer admin-token"}
	reader := []string{"Authorization", "Bearer reader-token"}
	publish := func(scope, doc string) {
		t.Helper()
		a := call(t, "POST", s.Base+"/admin/publish", `{"scope":"`+scope+`","document":`+doc+`,"expectedGeneration":0}`, admin...)
		expect(t, a, http.StatusOK, "")
	}
	publish("agentic.safe", `{"on":true}`)
	chunk := strings.Repeat("x", 200<<10)
	big := `{"a":"` + chunk + `","b":"` + chunk + `","c":"` + chunk + `","d":"` + chunk + `"}`
	var bigKeys []string
	for i := 0; i < 11; i++ {
		sc := fmt.Sprintf("agentic.big.d%02d", i)
		publish(sc, big)
		bigKeys = append(bigKeys, `"`+sc+`"`)
	}
	before, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	flag := s.Base + "/ofrep/v1/evaluate/flags/agentic.safe%23%2Fon"
	bulk := s.Base + "/ofrep/v1/evaluate/flags"
	ofrepErr := func(what string, a answer, status int, code string) {
		t.Helper()
		if a.status != status || !bytes.Contains(a.body, []byte(`"errorCode":"`+code+`"`)) {
			t.Errorf("%s: %d %.300s, want %d %s", what, a.status, a.body, status, code)
		}
	}

	// Contexts: past the body limit, past the depth limit (a little and a
	// lot), past the member limit.
	huge := `{"context":{"pad":"` + strings.Repeat("p", 1<<20) + `"}}`
	ofrepErr("huge context", call(t, "POST", flag, huge, reader...), 413, "INVALID_CONTEXT")
	deep := func(n int) string {
		return `{"context":{"d":` + strings.Repeat(`{"d":`, n) + `1` + strings.Repeat("}", n) + `}}`
	}
	ofrepErr("deep context", call(t, "POST", flag, deep(70), reader...), 400, "INVALID_CONTEXT")
	ofrepErr("very deep context", call(t, "POST", bulk, deep(100_000), reader...), 400, "INVALID_CONTEXT")
	var wide strings.Builder
	wide.WriteString(`{"context":{`)
	for i := 0; i < 10_001; i++ {
		if i > 0 {
			wide.WriteByte(',')
		}
		fmt.Fprintf(&wide, `"m%d":1`, i)
	}
	wide.WriteString(`}}`)
	ofrepErr("wide context", call(t, "POST", flag, wide.String(), reader...), 400, "INVALID_CONTEXT")
	ofrepErr("flags not strings", call(t, "POST", bulk, `{"context":{"flags":[1,2]}}`, reader...), 400, "INVALID_CONTEXT")
	// A pointer into each document named 256 times: 50 MiB of values,
	// refused by the answer's bound without a copy of any.
	var many []string
	for i := 0; i < 256; i++ {
		many = append(many, `"agentic.big.d00#/a"`)
	}
	ofrepErr("256 pointers into 200 KiB", call(t, "POST", bulk, `{"context":{"flags":[`+strings.Join(many, ",")+`]}}`, reader...), 400, "INVALID_CONTEXT")
	// Every readable scope: 12 of them, 8.8 MiB: past the bound.
	ofrepErr("every readable scope", call(t, "POST", bulk, `{"context":{}}`, reader...), 400, "INVALID_CONTEXT")

	t.Logf("peak RSS after the contexts: %d MiB", s.peakRSS(t)>>20)
	// Forged tokens: refused, never evaluated.
	for i := 0; i < 200; i++ {
		tok := fmt.Sprintf("Bearer forged-%d", i)
		if a := call(t, "POST", flag, `{"context":{}}`, "Authorization", tok); a.status != 403 {
			t.Fatalf("forged token %d: %d %s", i, a.status, a.body)
		}
	}
	ofrepErr("no token", call(t, "POST", bulk, `{"context":{}}`), 401, "GENERAL")
	ofrepErr("reader on another prefix", call(t, "POST", s.Base+"/ofrep/v1/evaluate/flags/other.x", `{"context":{}}`, reader...), 403, "GENERAL")

	t.Logf("peak RSS before the flood: %d MiB", s.peakRSS(t)>>20)
	// The flood: 24 clients at once, each asking three times for nine
	// documents of 800 KiB (an answer of 7.2 MiB). Built all at once they
	// took the server to 367 MiB; four at a time, 137–185.
	body := `{"context":{"targetingKey":"u","flags":[` + strings.Join(bigKeys[:9], ",") + `]}}`
	var wg sync.WaitGroup
	failures := make(chan string, 24*3)
	for c := 0; c < 24; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				req, _ := http.NewRequest("POST", bulk, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer reader-token")
				resp, err := httpClient.Do(req)
				if err != nil {
					failures <- err.Error()
					return
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || n < 9*800<<10 {
					failures <- fmt.Sprintf("status %d, %d bytes", resp.StatusCode, n)
				}
			}
		}()
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Errorf("flood: %s", f)
	}

	after, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, before) {
		t.Fatalf("the attack reached the log:\n%.300s", after[len(before):])
	}
	s.checkRSS(t)
}
