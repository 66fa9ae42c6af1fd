package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// VersionCommand prints the build's version: the module version and the
// VCS revision the go command stamped into the binary.
type VersionCommand struct {
	m *Main
}

// buildVersion is what varplane version reports.
type buildVersion struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

// readBuildVersion reads the build info: "(devel)" and no revision when the
// binary was built without module or VCS information.
func readBuildVersion() buildVersion {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return versionOf(info, runtime.Version())
}

// versionOf reads the version out of build info (nil: none).
func versionOf(info *debug.BuildInfo, goVersion string) buildVersion {
	v := buildVersion{Version: "(devel)", Go: goVersion}
	if info == nil {
		return v
	}
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// Run prints the version: one line, or with -o json one object.
func (c *VersionCommand) Run(_ context.Context, args []string) error {
	fs := c.m.newFlagSet("version", "[-o json]", `
Print the version of this build: the module version, the VCS revision and
time it was built from (with "+modified" when the tree had changes), and the
Go version. Also varplane --version.`)
	output := fs.String("o", "text", "output format: text or json")
	if _, err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	if *output != "text" && *output != "json" {
		return usagef("-o must be text or json, not %q", *output)
	}
	v := readBuildVersion()
	return emit(c.m.Stdout, *output == "json", v, func() error {
		line := "varplane " + v.Version
		if v.Revision != "" {
			line += " (" + v.Revision
			if v.Modified {
				line += "+modified"
			}
			if v.Time != "" {
				line += ", " + v.Time
			}
			line += ")"
		}
		_, err := fmt.Fprintf(c.m.Stdout, "%s %s\n", line, v.Go)
		return err
	})
}
