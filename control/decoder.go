package control

import (
	"context"

	"github.com/varplane/varplane"
)

// DecoderCheckPrefix starts the name of every family decoder check.
const DecoderCheckPrefix = "decoder:"

// FamilyDecoder registers the decoder of an instance family with the
// control service: give the Check it returns to Options.Checks. A change
// of a scope in the family (family itself or below it) fails the check
// when decode refuses its document, with the decoder's error as the issue,
// so a document the family's instances would install as failed is caught
// before it is published. Changes of other scopes pass it.
func FamilyDecoder[T any](family varplane.Scope, decode func(ctx context.Context, rec *varplane.RevisionRecord) (T, error)) Check {
	return CheckFunc{CheckName: DecoderCheckPrefix + string(family), Fn: func(ctx context.Context, in *CheckInput) ([]varplane.Issue, error) {
		if in.Scope != family && !in.Scope.IsDescendantOf(family) {
			return nil, nil
		}
		rec := &varplane.RevisionRecord{Scope: in.Scope, Document: in.Document, SchemaID: in.SchemaID}
		if _, err := decode(ctx, rec); err != nil {
			return []varplane.Issue{{Code: "decoder.refused", Path: "", Message: "the decoder of instance family " + string(family) + " refuses the document: " + err.Error()}}, nil
		}
		return nil, nil
	}}
}
