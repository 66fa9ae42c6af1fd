package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// testBeatStatusPage: a store that keeps statuses pages them
// (varplane.StatusPager): in byte-wise id order, after the cursor, at most
// limit each, the last page without a next; a limit out of range is cut
// to 1..MaxStatusPage.
func testBeatStatusPage(t *testing.T, h Harness) {
	s, hs := openBeats(t, h)
	p, ok := s.(varplane.StatusPager)
	if !ok {
		t.Fatalf("the %s store keeps statuses but does not page them (varplane.StatusPager)", s.Name())
	}
	ctx := context.Background()
	// Byte order, not a locale's: "B" < "a" < "a-1" < "a.2" < "b".
	ids := []string{"b", "a.2", "B", "a", "a-1"}
	for _, id := range ids {
		must(t, hs.WriteStatus(ctx, id, []byte(`{"instance":"`+id+`"}`)))
		must(t, hs.ListInstance(ctx, id, time.Now()))
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > len(ids) {
			t.Fatalf("paging does not end: %v", got)
		}
		page, next, err := p.InstanceStatusPage(ctx, after, 2)
		must(t, err)
		if len(page) > 2 {
			t.Fatalf("a page of limit 2 holds %d", len(page))
		}
		for _, v := range page {
			if want := `{"instance":"` + v.ID + `"}`; string(v.Value) != want {
				t.Fatalf("status of %s = %s, want %s", v.ID, v.Value, want)
			}
			got = append(got, v.ID)
		}
		if next == "" {
			break
		}
		after = next
	}
	if g, w := strings.Join(got, " "), "B a a-1 a.2 b"; g != w {
		t.Fatalf("paged ids = %s, want %s", g, w)
	}
	for _, limit := range []int{0, -1, varplane.MaxStatusPage + 1} {
		page, next, err := p.InstanceStatusPage(ctx, "", limit)
		must(t, err)
		if limit <= 0 && (len(page) != 1 || next != page[0].ID) {
			t.Errorf("limit %d: %d statuses, next %q; want one and its id", limit, len(page), next)
		}
		if limit > 0 && (len(page) != len(ids) || next != "") {
			t.Errorf("limit %d: %s, next %q; want all and no next", limit, fmt.Sprint(len(page)), next)
		}
	}
	page, next, err := p.InstanceStatusPage(ctx, "b", 10)
	must(t, err)
	if len(page) != 0 || next != "" {
		t.Errorf("after the last id: %d statuses, next %q", len(page), next)
	}
}
