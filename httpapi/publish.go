package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/wire"
)

// publishBody is the body of POST {base}/admin/publish.
type publishBody struct {
	Scope              *string         `json:"scope"`
	Document           wire.Value      `json:"document"`
	ExpectedGeneration json.RawMessage `json:"expectedGeneration"`
	SchemaID           *string         `json:"schemaId"`
	SchemaVersion      *string         `json:"schemaVersion"`
	Actor              *string         `json:"actor"`
	Reason             *string         `json:"reason"`
	IdempotencyKey     *string         `json:"idempotencyKey"`
}

// DecodePublish decodes and checks a POST {base}/admin/publish body: scope,
// document and expectedGeneration are required. Errors as
// DecodeCreateRevision. The document is a part of body, not a copy, and
// goes on as checked (PublishRequest.Checked) when the body's check found
// it compact: body must not be modified afterwards.
func DecodePublish(body []byte, lim varplane.Limits) (varplane.PublishRequest, error) {
	var b publishBody
	cb, err := wire.DecodeStrictBody(body, &b, lim)
	if err != nil {
		return varplane.PublishRequest{}, err
	}
	scope, err := wire.RequiredScope("scope", b.Scope)
	if err != nil {
		return varplane.PublishRequest{}, err
	}
	if err := requireDocument(json.RawMessage(b.Document)); err != nil {
		return varplane.PublishRequest{}, err
	}
	gen, err := wire.RequiredGeneration("expectedGeneration", b.ExpectedGeneration)
	if err != nil {
		return varplane.PublishRequest{}, err
	}
	return varplane.PublishRequest{
		Scope: scope, Document: json.RawMessage(b.Document), Checked: cb.Document(b.Document), ExpectedGeneration: gen,
		SchemaID: wire.Optional(b.SchemaID), SchemaVersion: wire.Optional(b.SchemaVersion),
		OnBehalfOf: wire.Optional(b.Actor), Reason: wire.Optional(b.Reason), IdempotencyKey: wire.Optional(b.IdempotencyKey),
	}, nil
}

// handlePublish serves POST {base}/admin/publish, a create (or find) and an
// activation in one commit: 200 {scope, generation, revision, effectiveAt,
// created}; 422 revision-invalid with issues; 409 revision-conflict.
func (h *Handler) handlePublish(w http.ResponseWriter, r *http.Request) {
	req, ok := mutation(h, w, r, DecodePublish, func(q *varplane.PublishRequest) (varplane.Scope, *string) { return q.Scope, &q.Actor })
	if !ok {
		return
	}
	if req.DryRun, ok = h.dryRun(w, r); !ok {
		return
	}
	start := time.Now()
	res, err := h.engine.Publish(r.Context(), req)
	h.metrics.timeCommit("publish", start)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if body, ok := appendPublishResult(make([]byte, 0, 256), res); ok && !res.DryRun {
		wire.WriteRaw(w, http.StatusOK, body)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// appendPublishResult appends the answer of a publish, the bytes
// wire.WriteJSON writes for res (newline included), without its reflection:
// this is one answer per commit. It reports false for a time that JSON
// cannot hold (a year outside 0–9999), which WriteJSON then refuses as it
// always has.
func appendPublishResult(b []byte, res varplane.PublishResult) ([]byte, bool) {
	if y := res.EffectiveAt.Year(); y < 0 || y > 9999 {
		return nil, false
	}
	b = append(b, `{"scope":`...)
	b = jsontext.AppendString(b, string(res.Scope))
	b = append(b, `,"generation":`...)
	b = strconv.AppendUint(b, uint64(res.Generation), 10)
	b = append(b, `,"revision":`...)
	b = jsontext.AppendString(b, string(res.Revision))
	b = append(b, `,"effectiveAt":"`...)
	b = res.EffectiveAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","created":`...)
	b = strconv.AppendBool(b, res.Created)
	return append(b, "}\n"...), true
}
