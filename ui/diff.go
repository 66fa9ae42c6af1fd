package ui

import (
	"strings"

	"github.com/varplane/varplane"
)

// sideBySide is two documents as aligned rows of lines: each row holds the
// left line, the right line, or both, and says whether it changed. The
// API's JSON Patch (Summary) says what changed; the rows show where.
type sideBySide struct {
	From, To varplane.Generation
	Rows     []diffRow
	Summary  string
	Changed  int
}

type diffRow struct {
	Left, Right     string
	LeftNo, RightNo int    // line numbers, 0 for none
	Kind            string // "same", "del", "add", "mod"
}

// maxDiffCells bounds the line alignment's table (lines × lines); past it
// the documents are shown side by side without alignment.
const maxDiffCells = 4 << 20

// sideBySideOf aligns the lines of a and b by their longest common
// subsequence. The JSON-level difference is the API's (control's diff);
// this is only the layout of two pretty-printed texts.
func sideBySideOf(a, b string) *sideBySide {
	la, lb := splitLines(a), splitLines(b)
	d := &sideBySide{}
	if len(la)*len(lb) > maxDiffCells {
		for i := 0; i < len(la) || i < len(lb); i++ {
			row := diffRow{Kind: "mod"}
			if i < len(la) {
				row.Left, row.LeftNo = la[i], i+1
			}
			if i < len(lb) {
				row.Right, row.RightNo = lb[i], i+1
			}
			d.Rows = append(d.Rows, row)
		}
		d.Changed = len(d.Rows)
		return d
	}
	// lcs[i][j] is the length of the common subsequence of la[i:] and lb[j:].
	lcs := make([][]int32, len(la)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(lb)+1)
	}
	for i := len(la) - 1; i >= 0; i-- {
		for j := len(lb) - 1; j >= 0; j-- {
			if la[i] == lb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	var dels, adds []diffRow
	flush := func() {
		// Pair deletions with additions on the same rows (a modification).
		for k := 0; k < len(dels) || k < len(adds); k++ {
			row := diffRow{}
			switch {
			case k < len(dels) && k < len(adds):
				row = diffRow{Left: dels[k].Left, LeftNo: dels[k].LeftNo, Right: adds[k].Right, RightNo: adds[k].RightNo, Kind: "mod"}
			case k < len(dels):
				row = dels[k]
			default:
				row = adds[k]
			}
			d.Rows = append(d.Rows, row)
			d.Changed++
		}
		dels, adds = dels[:0], adds[:0]
	}
	for i < len(la) || j < len(lb) {
		switch {
		case i < len(la) && j < len(lb) && la[i] == lb[j]:
			flush()
			d.Rows = append(d.Rows, diffRow{Left: la[i], LeftNo: i + 1, Right: lb[j], RightNo: j + 1, Kind: "same"})
			i, j = i+1, j+1
		case j < len(lb) && (i == len(la) || lcs[i][j+1] >= lcs[i+1][j]):
			adds = append(adds, diffRow{Right: lb[j], RightNo: j + 1, Kind: "add"})
			j++
		default:
			dels = append(dels, diffRow{Left: la[i], LeftNo: i + 1, Kind: "del"})
			i++
		}
	}
	flush()
	return d
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimRight(s, "\n"), "\n")
}
