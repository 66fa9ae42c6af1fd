package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/wire"
)

// OFREP, the OpenFeature Remote Evaluation Protocol (docs/openfeature.md):
//
//	POST {base}/ofrep/v1/evaluate/flags/{key}   one flag
//	POST {base}/ofrep/v1/evaluate/flags         bulk, with ETag and 304
//
// so that a provider's base URL is the server's URL and base path. A flag
// key names a scope and a JSON Pointer into its head document
// (wire.ParseFlagKey); its value is the value there, its variant the head's
// revision, its metadata the head's generation and revision, its reason
// STATIC (SPLIT when a rollout chose the revision). Authorization is the
// read authorization of the scope, with the same tokens as every read.

// Rollouts chooses the revision an OpenFeature evaluation of a scope
// serves, for scopes under a progressive rollout. Options.Rollouts is nil
// until a rollout mechanism plugs in; without one every evaluation serves
// the scope's head.
type Rollouts interface {
	// PickerOf returns what one request picks each of its flags with.
	// rolloutHead is varplane.RolloutScope's head (nil: none) as the
	// request read it together with its flags' scopes (Engine.Heads), so
	// that the rollouts and the heads are one view and every flag of the
	// request is picked from one reading of the rollouts in progress.
	//
	// pick returns the head to serve for head's scope and the evaluation
	// context's targeting key ("" when the context has none), and split
	// true when a rollout chose it. A scope under no rollout returns head
	// itself. A scope whose rollout needs a targeting key and got none
	// returns an error of code varplane.CodeTargetingKeyMissing; head is
	// the one snapshot of the request, and pick must not read another head
	// of the scope.
	PickerOf(rolloutHead *varplane.Head) (pick func(ctx context.Context, head *varplane.Head, targetingKey string) (picked *varplane.Head, split bool, err error))
}

// picker is what one request picks its flags with (Rollouts.PickerOf).
type picker = func(ctx context.Context, head *varplane.Head, targetingKey string) (*varplane.Head, bool, error)

// MaxOFREPBulkBytes bounds the values of one bulk evaluation's answer: past
// it the request is answered 400 INVALID_CONTEXT (limit-exceeded,
// "ofrep-bulk-bytes") and nothing is written.
const MaxOFREPBulkBytes = 8 << 20

// Bulk answers of more than OFREPLargeBulkBytes are built MaxOFREPLargeBulks
// at a time; the others wait for as long as their client does. So the
// large answers in memory are at most 4 × 8 MiB, whatever the callers do;
// smaller ones are as many as the requests the listener lets in.
const (
	OFREPLargeBulkBytes = 1 << 20
	MaxOFREPLargeBulks  = 4
)

func (h *Handler) ofrepRoutes(b string) {
	// The mux knows the route (for 405 and its listing) but ServeHTTP
	// answers it first, taking the key from the path as it came.
	h.ofrepFlagPrefix = b + "/ofrep/v1/evaluate/flags/"
	h.ofrepFlagRoute = h.handle("POST "+h.ofrepFlagPrefix+"{key...}", quiet, h.handleOFREPFlag)
	h.handle("POST "+b+"/ofrep/v1/evaluate/flags", quiet, h.handleOFREPBulk)
}

// ofrepRequest reads and decodes an OFREP request's body within the
// handler's limits.
func (h *Handler) ofrepRequest(w http.ResponseWriter, r *http.Request) (wire.OFREPContext, error) {
	if err := wire.CheckContentType(r, "application/json"); err != nil {
		return wire.OFREPContext{}, err
	}
	body, err := wire.ReadBody(w, r, h.limits.MaxBodyBytes)
	if err != nil {
		return wire.OFREPContext{}, err
	}
	return wire.DecodeOFREP(body, h.limits)
}

// flagNotFound is the error of a key that names no flag: malformed, or a
// scope without a head.
func flagNotFound(err error) error {
	return &varplane.Error{Code: varplane.CodeNotFound, Message: "no such flag: " + varplane.ErrorMessage(err)}
}

// handleOFREPFlag serves POST {base}/ofrep/v1/evaluate/flags/{key}: 200
// with the flag's evaluation, or OFREP's failure body: 404 FLAG_NOT_FOUND
// (a malformed key, a scope without a head, a pointer to nothing), 400
// INVALID_CONTEXT (a body refused), 400 TARGETING_KEY_MISSING, 401/403
// from the scope's read authorization (before anything tells whether the
// flag exists).
func (h *Handler) handleOFREPFlag(w http.ResponseWriter, r *http.Request) {
	// The path as decoded, not cleaned: %23 is '#', %2F '/'.
	key := strings.TrimPrefix(r.URL.Path, h.ofrepFlagPrefix)
	if len(key) > wire.MaxFlagKeyBytes {
		key = key[:wire.MaxFlagKeyBytes] // never echo more than a key can be
	}
	oc, err := h.ofrepRequest(w, r)
	if err != nil {
		wire.WriteOFREPError(w, r, h.log, key, err)
		return
	}
	fk, err := wire.ParseFlagKey(key)
	if err != nil {
		// Authenticate all the same, so that a refused token is told so
		// rather than what exists.
		if _, aerr := h.authorize(r, varplane.KindIdentify, "", false); aerr != nil {
			err = aerr
		} else {
			err = flagNotFound(err)
		}
		wire.WriteOFREPError(w, r, h.log, key, err)
		return
	}
	if _, err := h.authorize(r, varplane.KindRead, fk.Scope, false); err != nil {
		wire.WriteOFREPError(w, r, h.log, key, err)
		return
	}
	heads, rd, err := h.flagHeads(r.Context(), []varplane.Scope{fk.Scope}, oc.TargetingKey)
	if err != nil {
		wire.WriteOFREPError(w, r, h.log, key, err)
		return
	}
	ev, err := h.evaluate(r.Context(), key, fk, heads[0], oc.TargetingKey, rd)
	if err != nil {
		wire.WriteOFREPError(w, r, h.log, key, err)
		return
	}
	b := appendEvaluation(make([]byte, 0, len(ev.value)+len(key)+len(ev.head.Scope)+evaluationBytes), ev)
	wire.WriteRaw(w, http.StatusOK, append(b, '\n'))
}

// evaluation is one flag evaluated: its value (raw JSON) from head.
type evaluation struct {
	key   string
	value []byte
	head  *varplane.Head
	split bool
}

// flagHeads reads the heads of scopes as one view (Engine.Heads) and,
// with Options.Rollouts and a targeting key, the rollouts in progress in
// the same view: every flag of the request is picked with the one picker
// it returns (nil: no rollouts to pick from). Without a key no rollout
// splits anything, and the rollouts are not read.
func (h *Handler) flagHeads(ctx context.Context, scopes []varplane.Scope, targetingKey string) ([]*varplane.Head, picker, error) {
	if h.rollouts == nil || targetingKey == "" {
		heads, err := h.engine.Heads(ctx, scopes)
		if h.rollouts == nil || err != nil {
			return heads, nil, err
		}
		return heads, h.rollouts.PickerOf(nil), nil // it may still want a key
	}
	// The key decides, not the instance: a read replica that a rollout's
	// step selects serves its revision to readers that name no entity,
	// but a key is picked from the heads themselves.
	heads, err := h.engine.StoredHeads(ctx, append(scopes[:len(scopes):len(scopes)], varplane.RolloutScope))
	if err != nil {
		return nil, nil, err
	}
	n := len(heads) - 1
	return heads[:n], h.rollouts.PickerOf(heads[n]), nil
}

// evaluate evaluates fk against head, the request's snapshot of its scope
// (nil: no head), picked with pick, the request's picker (nil: no
// rollouts).
func (h *Handler) evaluate(ctx context.Context, key string, fk wire.FlagKey, head *varplane.Head, targetingKey string, pick picker) (evaluation, error) {
	if head == nil {
		return evaluation{}, &varplane.Error{Code: varplane.CodeNoHead, Message: "no such flag: its scope has no active head"}
	}
	split := false
	if pick != nil {
		picked, s, err := pick(ctx, head, targetingKey)
		if err != nil {
			return evaluation{}, err
		}
		head, split = picked, s
	}
	v, err := wire.LookupFlag(head.Document, fk.Tokens)
	if err != nil {
		return evaluation{}, err
	}
	return evaluation{key: key, value: v, head: head, split: split}, nil
}

// evaluationBytes is what appendEvaluation writes beside the key, the
// value and the scope, at most: the names, the revision twice, the
// generation, escapes of the key and scope aside.
const evaluationBytes = 300

// appendEvaluation appends OFREP's evaluation success of ev.
func appendEvaluation(b []byte, ev evaluation) []byte {
	b = append(b, `{"key":`...)
	b = jsontext.AppendString(b, ev.key)
	b = append(b, `,"value":`...)
	b = append(b, ev.value...)
	if ev.split {
		b = append(b, `,"reason":"SPLIT","variant":`...)
	} else {
		b = append(b, `,"reason":"STATIC","variant":`...)
	}
	// The head's ETag is its revision as a JSON string (sha256: and hex
	// need no escape), made once when the head was installed.
	b = append(b, ev.head.ETag()...)
	b = append(b, `,"metadata":{"scope":`...)
	b = jsontext.AppendString(b, string(ev.head.Scope))
	b = append(b, `,"generation":`...)
	b = strconv.AppendUint(b, uint64(ev.head.Generation), 10)
	b = append(b, `,"revision":`...)
	b = append(b, ev.head.ETag()...)
	return append(b, "}}"...)
}

// bulkItem is one flag of a bulk evaluation: an evaluation or a failure.
type bulkItem struct {
	ev  evaluation
	err error
}

// handleOFREPBulk serves POST {base}/ofrep/v1/evaluate/flags: the flags
// named in context.flags (at most wire.MaxOFREPFlags, each answered in
// order, a failure as an item), or, without context.flags, the whole
// document of every scope with a head that the caller may read (internal
// scopes aside; more than wire.MaxOFREPFlags readable scopes is
// limit-exceeded). Every flag is read from one snapshot of the store. The
// answer's ETag is a digest of every key with its revision (or failure);
// an If-None-Match naming it is answered 304. The values together are at
// most MaxOFREPBulkBytes.
func (h *Handler) handleOFREPBulk(w http.ResponseWriter, r *http.Request) {
	oc, err := h.ofrepRequest(w, r)
	if err != nil {
		wire.WriteOFREPError(w, r, h.log, "", err)
		return
	}
	// Authenticate first: a missing or unknown token is refused, never
	// answered an empty list.
	if _, err := h.authorize(r, varplane.KindIdentify, "", false); err != nil {
		wire.WriteOFREPError(w, r, h.log, "", err)
		return
	}
	keys, fks, items, err := h.bulkFlags(r, oc.Flags)
	if err != nil {
		wire.WriteOFREPError(w, r, h.log, "", err)
		return
	}
	scopes := make([]varplane.Scope, 0, len(fks))
	for i := range fks {
		if items[i].err == nil {
			scopes = append(scopes, fks[i].Scope)
		}
	}
	heads, rd, err := h.flagHeads(r.Context(), scopes, oc.TargetingKey)
	if err != nil {
		wire.WriteOFREPError(w, r, h.log, "", err)
		return
	}
	size, j := 32, 0
	digest := sha256.New()
	for i := range fks {
		if items[i].err == nil {
			items[i].ev, items[i].err = h.evaluate(r.Context(), keys[i], fks[i], heads[j], oc.TargetingKey, rd)
			j++
		}
		it := &items[i]
		digest.Write([]byte(keys[i]))
		digest.Write([]byte{0})
		if it.err != nil {
			if oc.Flags == nil && varplane.ErrorCode(it.err) == varplane.CodeNoHead {
				it.err = errSkip // listed scopes without a head are not flags
				continue
			}
			digest.Write([]byte(wire.OFREPFailureOf(keys[i], it.err).ErrorCode))
			size += len(keys[i]) + 160
		} else {
			digest.Write([]byte(it.ev.head.Revision))
			if it.ev.split {
				digest.Write([]byte{1})
			}
			size += len(it.ev.value) + len(keys[i]) + len(it.ev.head.Scope) + evaluationBytes
		}
		digest.Write([]byte{'\n'})
		if size > MaxOFREPBulkBytes {
			wire.WriteOFREPError(w, r, h.log, "", &varplane.Error{Code: varplane.CodeLimitExceeded, Limit: "ofrep-bulk-bytes",
				Message: "the flags' values are more than " + strconv.Itoa(MaxOFREPBulkBytes) + " bytes; name fewer in context.flags"})
			return
		}
	}
	etag := `"ofrep-` + hex.EncodeToString(digest.Sum(nil)[:16]) + `"`
	hdr := w.Header()
	hdr["Etag"] = []string{etag}
	hdr["Cache-Control"] = []string{"no-cache"}
	if etagMatches(r.Header["If-None-Match"], etag[1:len(etag)-1]) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if size > OFREPLargeBulkBytes {
		select {
		case h.largeBulks <- struct{}{}:
			defer func() { <-h.largeBulks }()
		case <-r.Context().Done():
			return // the client went away
		}
	}
	b := make([]byte, 0, size)
	b = append(b, `{"flags":[`...)
	first := true
	for i := range items {
		it := &items[i]
		if it.err == errSkip {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		if it.err != nil {
			f := wire.OFREPFailureOf(keys[i], it.err)
			b = append(b, `{"key":`...)
			b = jsontext.AppendString(b, f.Key)
			b = append(b, `,"errorCode":`...)
			b = jsontext.AppendString(b, f.ErrorCode)
			b = append(b, `,"errorDetails":`...)
			b = jsontext.AppendString(b, f.ErrorDetails)
			b = append(b, '}')
			continue
		}
		b = appendEvaluation(b, it.ev)
	}
	b = append(b, "]}\n"...)
	wire.WriteRaw(w, http.StatusOK, b)
}

// errSkip marks a listed scope that is not answered (it has no head).
var errSkip = &varplane.Error{Code: varplane.CodeNoHead, Message: "skipped"}

// bulkFlags returns the flags of a bulk evaluation: their keys, parsed
// keys and a failure already known (a malformed key, a scope the caller
// may not read) for each.
func (h *Handler) bulkFlags(r *http.Request, named []string) ([]string, []wire.FlagKey, []bulkItem, error) {
	if named != nil {
		fks := make([]wire.FlagKey, len(named))
		items := make([]bulkItem, len(named))
		allowed := make(map[varplane.Scope]error, len(named))
		for i, k := range named {
			fk, err := wire.ParseFlagKey(k)
			if err != nil {
				items[i].err = flagNotFound(err)
				continue
			}
			fks[i] = fk
			aerr, seen := allowed[fk.Scope]
			if !seen {
				_, aerr = h.authorize(r, varplane.KindRead, fk.Scope, false)
				allowed[fk.Scope] = aerr
			}
			items[i].err = aerr
		}
		return named, fks, items, nil
	}
	all, err := h.engine.Store().Scopes(r.Context())
	if err != nil {
		return nil, nil, nil, err
	}
	var keys []string
	var fks []wire.FlagKey
	for _, sc := range all {
		if sc.Internal() {
			continue
		}
		if _, err := h.authorize(r, varplane.KindRead, sc, false); err != nil {
			if varplane.ErrorCode(err) == varplane.CodeInternal {
				return nil, nil, nil, err
			}
			continue
		}
		if len(keys) == wire.MaxOFREPFlags {
			return nil, nil, nil, &varplane.Error{Code: varplane.CodeLimitExceeded, Limit: "ofrep-flags",
				Message: "the caller may read more than " + strconv.Itoa(wire.MaxOFREPFlags) + " scopes; name the flags in context.flags"}
		}
		keys = append(keys, string(sc))
		fks = append(fks, wire.FlagKey{Scope: sc})
	}
	return keys, fks, make([]bulkItem, len(keys)), nil
}
