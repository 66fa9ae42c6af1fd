package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Group is one measured figure with its sides: every side ran once per
// round, in alternating order, under the same load generator.
type Group struct {
	ID       string             `json:"id"`
	Scenario string             `json:"scenario"`
	Title    string             `json:"title"`
	Unit     string             `json:"unit"`
	RatioTo  []string           `json:"ratioTo"`
	Sides    []string           `json:"sides"`
	Runs     map[string][]Stats `json:"runs"`
	Skipped  map[string]string  `json:"skipped,omitempty"`
	Notes    []string           `json:"notes,omitempty"`
	Summary  map[string]Summary `json:"summary"`
}

// Summary is the median and range over the rounds of one side, with its
// ratios to every peer named in RatioTo computed round by round.
type Summary struct {
	Rounds     int              `json:"rounds"`
	Throughput Range            `json:"throughput"`
	P50        Range            `json:"p50Ms"`
	P99        Range            `json:"p99Ms"`
	Max        Range            `json:"maxMs"`
	Extra      map[string]Range `json:"extra,omitempty"`
	Ratio      map[string]Ratio `json:"ratio,omitempty"`
	Errors     int              `json:"errors"`
	FirstError string           `json:"firstError,omitempty"`
	extraKeys  []string
}

// Range is a median with the smallest and largest value seen.
type Range struct {
	Median num `json:"median"`
	Min    num `json:"min"`
	Max    num `json:"max"`
}

// num is a float64 that encodes NaN (nothing measured) as JSON null.
type num = jsonFloat

type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = jsonFloat(math.NaN())
		return nil
	}
	var v float64
	err := json.Unmarshal(b, &v)
	*f = jsonFloat(v)
	return err
}

// Ratio compares a side with a peer round by round: Throughput is
// side/peer (higher is better), P99 is side/peer (lower is better).
type Ratio struct {
	Throughput Range `json:"throughput"`
	P99        Range `json:"p99"`
}

func rangeOf(xs []float64) Range {
	lo, hi := minMax(xs)
	return Range{Median: num(median(xs)), Min: num(lo), Max: num(hi)}
}

func newGroup(id, scenario, title, unit string, ratioTo ...string) *Group {
	return &Group{ID: id, Scenario: scenario, Title: title, Unit: unit, RatioTo: ratioTo,
		Runs: map[string][]Stats{}, Skipped: map[string]string{}}
}

func (g *Group) skip(side, reason string) {
	reason, _, _ = strings.Cut(strings.TrimSpace(reason), "\n")
	if len(reason) > 160 {
		reason = reason[:160] + "…"
	}
	if !contains(g.Sides, side) {
		g.Sides = append(g.Sides, side)
	}
	g.Skipped[side] = reason
}

func (g *Group) add(side string, s Stats) {
	if !contains(g.Sides, side) {
		g.Sides = append(g.Sides, side)
	}
	g.Runs[side] = append(g.Runs[side], s)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (g *Group) summarize() {
	g.Summary = map[string]Summary{}
	for _, side := range g.Sides {
		runs := g.Runs[side]
		if len(runs) == 0 {
			continue
		}
		var thr, p50, p99, mx []float64
		extra := map[string][]float64{}
		var keys []string
		sm := Summary{Rounds: len(runs)}
		for _, r := range runs {
			thr = append(thr, r.Throughput)
			p50 = append(p50, r.P50)
			p99 = append(p99, r.P99)
			mx = append(mx, r.Max)
			sm.Errors += r.Errors
			if sm.FirstError == "" {
				sm.FirstError = r.FirstError
			}
			for k, v := range r.Extra {
				if _, ok := extra[k]; !ok {
					keys = append(keys, k)
				}
				extra[k] = append(extra[k], v)
			}
		}
		sm.Throughput, sm.P50, sm.P99, sm.Max = rangeOf(thr), rangeOf(p50), rangeOf(p99), rangeOf(mx)
		if len(extra) > 0 {
			sm.Extra = map[string]Range{}
			for k, v := range extra {
				sm.Extra[k] = rangeOf(v)
			}
		}
		sort.Strings(keys)
		sm.extraKeys = keys
		for _, peer := range g.RatioTo {
			if peer == side {
				continue
			}
			pr := g.Runs[peer]
			n := min(len(pr), len(runs))
			if n == 0 {
				continue
			}
			var rt, rp []float64
			for i := 0; i < n; i++ {
				if pr[i].Throughput > 0 {
					rt = append(rt, runs[i].Throughput/pr[i].Throughput)
				}
				if pr[i].P99 > 0 {
					rp = append(rp, runs[i].P99/pr[i].P99)
				}
			}
			if sm.Ratio == nil {
				sm.Ratio = map[string]Ratio{}
			}
			sm.Ratio[peer] = Ratio{Throughput: rangeOf(rt), P99: rangeOf(rp)}
		}
		g.Summary[side] = sm
	}
}

// Target is one pass/miss check on a ratio (or, without Peer, an absolute
// figure) from the summaries.
type Target struct {
	Name   string  `json:"name"`
	Group  string  `json:"group"`
	Side   string  `json:"side"`
	Peer   string  `json:"peer,omitempty"`
	Metric string  `json:"metric"` // "throughput", "p99", or (without Peer) a figure of the side's Extra
	Op     string  `json:"op"`     // ">=" or "<="
	Want   float64 `json:"want"`
	Got    num     `json:"got"`
	Status string  `json:"status"` // pass, miss, n/a
	Why    string  `json:"why,omitempty"`
}

func (t *Target) eval(groups map[string]*Group) {
	t.Got = num(math.NaN())
	g, ok := groups[t.Group]
	if !ok {
		t.Status, t.Why = "n/a", "scenario not run"
		return
	}
	sm, ok := g.Summary[t.Side]
	if !ok {
		t.Status, t.Why = "n/a", "side not measured: "+g.Skipped[t.Side]
		return
	}
	var got float64
	if t.Peer == "" {
		switch t.Metric {
		case "p99":
			got = float64(sm.P99.Median)
		case "throughput":
			got = float64(sm.Throughput.Median)
		default:
			x, ok := sm.Extra[t.Metric]
			if !ok {
				t.Status, t.Why = "n/a", "the side has no figure "+t.Metric
				return
			}
			got = float64(x.Median)
		}
	} else {
		r, ok := sm.Ratio[t.Peer]
		if !ok {
			t.Status, t.Why = "n/a", "peer not measured: "+g.Skipped[t.Peer]
			return
		}
		if t.Metric == "p99" {
			got = float64(r.P99.Median)
		} else {
			got = float64(r.Throughput.Median)
		}
	}
	t.Got = num(got)
	pass := got >= t.Want
	if t.Op == "<=" {
		pass = got <= t.Want
	}
	if sm.Errors > 0 && float64(sm.Throughput.Median) == 0 {
		pass = false
	}
	t.Status = map[bool]string{true: "pass", false: "miss"}[pass]
}

// Report is everything results.json holds.
type Report struct {
	Command  string            `json:"command"`
	Machine  map[string]string `json:"machine"`
	Started  time.Time         `json:"started"`
	Seconds  float64           `json:"seconds"`
	Quick    bool              `json:"quick"`
	Groups   []*Group          `json:"groups"`
	Targets  []*Target         `json:"targets"`
	Notes    []string          `json:"notes,omitempty"`
	Profiles []string          `json:"profiles,omitempty"`
	SDK      []SDKBench        `json:"sdk,omitempty"`
}

func fnum(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x == 0:
		return "0"
	case math.Abs(x) >= 1000:
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.1f", x)
	case math.Abs(x) >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3f", x)
	}
}

// tnum shows a target's figure with enough digits that a miss by a hair
// does not print as the threshold itself.
func tnum(x float64) string {
	if !math.IsNaN(x) && math.Abs(x) < 100 {
		return fmt.Sprintf("%.3f", x)
	}
	return fnum(x)
}

func frange(r Range) string {
	if r.Min == r.Max {
		return fnum(float64(r.Median))
	}
	return fmt.Sprintf("%s [%s–%s]", fnum(float64(r.Median)), fnum(float64(r.Min)), fnum(float64(r.Max)))
}

func fratio(r Range) string {
	if math.IsNaN(float64(r.Median)) {
		return "–"
	}
	if r.Min == r.Max {
		return fmt.Sprintf("%.2f×", r.Median)
	}
	return fmt.Sprintf("%.2f× [%.2f–%.2f]", r.Median, r.Min, r.Max)
}

// rows renders a group as table rows; the first row is the header.
func (g *Group) rows() [][]string {
	head := []string{"side", g.Unit + " (median [min–max])", "p50 ms", "p99 ms", "max ms"}
	for _, p := range g.RatioTo {
		head = append(head, "vs "+p+" thr", "vs "+p+" p99")
	}
	head = append(head, "other")
	out := [][]string{head}
	for _, side := range g.Sides {
		if why, ok := g.Skipped[side]; ok {
			row := []string{side, "not measured: " + why}
			for len(row) < len(head) {
				row = append(row, "")
			}
			out = append(out, row)
			continue
		}
		sm, ok := g.Summary[side]
		if !ok {
			continue
		}
		row := []string{side, frange(sm.Throughput), frange(sm.P50), frange(sm.P99), frange(sm.Max)}
		for _, p := range g.RatioTo {
			if r, ok := sm.Ratio[p]; ok {
				row = append(row, fratio(r.Throughput), fratio(r.P99))
			} else {
				row = append(row, "", "")
			}
		}
		var other []string
		for _, k := range sm.extraKeys {
			other = append(other, k+"="+frange(sm.Extra[k]))
		}
		if sm.Errors > 0 {
			e := sm.FirstError
			if len(e) > 80 {
				e = e[:80] + "…"
			}
			other = append(other, fmt.Sprintf("errors=%d (%s)", sm.Errors, e))
		}
		row = append(row, strings.Join(other, " "))
		out = append(out, row)
	}
	return out
}

func printTable(w io.Writer, r *Report) {
	for _, g := range r.Groups {
		fmt.Fprintf(w, "\n== %s: %s\n", g.ID, g.Title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, row := range g.rows() {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
		for _, n := range g.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
	fmt.Fprintf(w, "\n== targets\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range r.Targets {
		fmt.Fprintf(tw, "%s\t%s\tgot %s\twant %s %s\t%s\n", strings.ToUpper(t.Status), t.Name, tnum(float64(t.Got)), t.Op, fnum(t.Want), t.Why)
	}
	tw.Flush()
	if len(r.SDK) > 0 {
		fmt.Fprintf(w, "\n== sdk (go test -bench)\n")
		for _, b := range r.SDK {
			fmt.Fprintf(w, "  %s\t%.1f ns/op\t%.0f B/op\t%.0f allocs/op\n", b.Name, b.NsPerOp, b.BytesPerOp, b.AllocsPerOp)
		}
	}
}

func mdTable(w io.Writer, rows [][]string) {
	esc := func(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
	for i, row := range rows {
		cells := make([]string, len(row))
		for j, c := range row {
			cells[j] = esc(c)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		if i == 0 {
			seps := make([]string, len(row))
			for j := range seps {
				seps[j] = "---"
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(seps, " | "))
		}
	}
}

func writeMarkdown(path string, r *Report, notes string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer f.Close()
	w := f
	fmt.Fprintf(w, "# Benchmarks: varplane side by side with etcd and a net/http ceiling\n\n")
	fmt.Fprintf(w, "Generated by the harness in `bench/` (its own Go module, so the etcd client is never linked\n")
	fmt.Fprintf(w, "into varplane). Do not edit by hand: run the command below again.\n\n")
	fmt.Fprintf(w, "- Command: `%s`%s\n", r.Command, map[bool]string{true: " (quick: fewer and shorter runs)", false: ""}[r.Quick])
	fmt.Fprintf(w, "- Machine: %s\n", machineLine(r.Machine))
	fmt.Fprintf(w, "- Date: %s; the run took %.0f s\n", r.Machine["date"], r.Seconds)
	fmt.Fprintf(w, "- Raw figures: `bench/results.json`\n\n")
	fmt.Fprintf(w, "## Targets\n\n")
	rows := [][]string{{"status", "target", "got", "want", "note"}}
	for _, t := range r.Targets {
		rows = append(rows, []string{strings.ToUpper(t.Status), t.Name, tnum(float64(t.Got)), t.Op + " " + fnum(t.Want), t.Why})
	}
	mdTable(w, rows)
	fmt.Fprintf(w, "\n## Results\n\n")
	fmt.Fprintf(w, "Every figure is the median over the rounds, with [min–max]; every ratio is computed inside one\n")
	fmt.Fprintf(w, "round (the side and its peer measured back to back, order alternating) and then summarised the\n")
	fmt.Fprintf(w, "same way. Latencies are milliseconds as seen by the load generator.\n")
	for _, g := range r.Groups {
		fmt.Fprintf(w, "\n### %s — %s\n\n", g.ID, g.Title)
		mdTable(w, g.rows())
		if len(g.Notes) > 0 {
			fmt.Fprintln(w)
			for _, n := range g.Notes {
				fmt.Fprintf(w, "- %s\n", n)
			}
		}
	}
	if len(r.SDK) > 0 {
		fmt.Fprintf(w, "\n### sdk — `go test -run '^$' -bench BenchmarkRead ./client/`\n\n")
		rows := [][]string{{"benchmark", "ns/op", "B/op", "allocs/op"}}
		for _, b := range r.SDK {
			rows = append(rows, []string{b.Name, fmt.Sprintf("%.1f", b.NsPerOp), fmt.Sprintf("%.0f", b.BytesPerOp), fmt.Sprintf("%.0f", b.AllocsPerOp)})
		}
		mdTable(w, rows)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "\n## Run notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
	if notes != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(notes))
	}
	if len(r.Profiles) > 0 {
		fmt.Fprintf(w, "\n## Profiles of the hot paths (this run)\n\n")
		fmt.Fprintf(w, "Taken with `-profile`: the library embedded in a child process of the harness (file store,\n")
		fmt.Fprintf(w, "engine, push hub, httpapi handler, wired as cmd/varplane wires them) with net/http/pprof,\n")
		fmt.Fprintf(w, "under the same load generator; 3 s CPU profile during the load, then the allocation profile.\n\n")
		for _, p := range r.Profiles {
			fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(p))
		}
	}
	return f.Close()
}

func machineLine(m map[string]string) string {
	return fmt.Sprintf("%s, %s cores, %s memory, Linux %s, %s, %s", m["cpu"], m["cores"], m["memory"], m["kernel"], m["go"], m["etcd"])
}

func writeJSON(path string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// side is one contender of a group.
type side struct {
	name string
	run  func(ctx context.Context) (Stats, error)
}

// runRounds measures every side rounds times, reversing the order on every
// other round and waiting for an idle machine before each measurement.
func runRounds(ctx context.Context, cfg *config, g *Group, rounds int, sides []side) {
	for r := 0; r < rounds && ctx.Err() == nil; r++ {
		order := append([]side(nil), sides...)
		if r%2 == 1 {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for _, s := range order {
			if _, bad := g.Skipped[s.name]; bad {
				continue
			}
			idle := waitIdle(ctx, cfg.idleThreshold, cfg.idleSample, cfg.idleWait)
			st, err := s.run(ctx)
			if err != nil {
				logf("%s/%s round %d: %v", g.ID, s.name, r+1, err)
				g.skip(s.name, err.Error())
				continue
			}
			st.Idle = idle
			g.add(s.name, st)
			logf("%s/%s round %d: %s=%s p50=%s p99=%s max=%s err=%d idle=%.0f%%", g.ID, s.name, r+1, g.Unit, fnum(st.Throughput), fnum(st.P50), fnum(st.P99), fnum(st.Max), st.Errors, idle*100)
		}
	}
	// A side that failed in a later round keeps the rounds it measured.
	for name := range g.Skipped {
		if len(g.Runs[name]) > 0 {
			g.Notes = append(g.Notes, fmt.Sprintf("%s failed in a later round: %s", name, g.Skipped[name]))
			delete(g.Skipped, name)
		}
	}
	g.summarize()
}
