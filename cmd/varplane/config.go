package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/config/secret"
	"github.com/varplane/varplane/internal/atomicfile"
)

// ConfigCommand is the `varplane config` group: the component configuration
// tools that run locally, on files (deploy, conceal). They never talk to a
// server.
type ConfigCommand struct {
	m *Main
}

// configCommands lists the subcommands of `varplane config`.
var configCommands = []struct {
	name, summary string
	run           func(c *ConfigCommand, args []string) error
}{
	{"deploy", "print the deployment declaration of manifests and an annotation, for one environment", (*ConfigCommand).deploy},
	{"conceal", "write NAME=value secrets as an env file and a Kubernetes Secret for the consumers", (*ConfigCommand).conceal},
}

// Run dispatches to the subcommand named by args[0].
func (c *ConfigCommand) Run(_ context.Context, args []string) error {
	if len(args) == 0 {
		c.usage(c.m.Stderr)
		return &usageError{err: errors.New("config: a subcommand is required"), reported: true}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		c.usage(c.m.Stdout)
		return nil
	}
	for _, sc := range configCommands {
		if sc.name == args[0] {
			return sc.run(c, args[1:])
		}
	}
	c.usage(c.m.Stderr)
	return &usageError{err: fmt.Errorf("config: unknown subcommand %q", args[0]), reported: true}
}

func (c *ConfigCommand) usage(w io.Writer) {
	fmt.Fprint(w, "Usage: varplane config <subcommand> [flags]\n\nComponent configuration tools (see docs/configuration.md):\n\n")
	for _, sc := range configCommands {
		fmt.Fprintf(w, "  %-8s %s\n", sc.name, sc.summary)
	}
	fmt.Fprint(w, "\nRun \"varplane config <subcommand> -h\" for its flags.\n")
}

// deploy is `varplane config deploy`.
func (c *ConfigCommand) deploy(args []string) error {
	fs := c.m.newFlagSet("config deploy", "--manifests DIR [--annotation FILE] [--environment ENV]", `
Read every component manifest under --manifests (.yaml, .yml and .json files,
recursively, that declare configuration), apply the annotation file's
configuration resolved for --environment (key@ENV tags), and print the
deployment declaration as JSON on stdout: each component's epoch, schema and
deployed defaults. "varplane serve --components FILE" loads it.

Exit status 1 when a manifest or the annotation is invalid; the message names
the file and the JSON Pointer at fault.`)
	manifests := fs.String("manifests", "", "directory of component manifests (required)")
	annotation := fs.String("annotation", "", "annotation (context) file whose configuration object gives values per component")
	env := fs.String("environment", "", "environment to resolve key@ENV tags for; without it every tagged key is dropped")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("manifests", *manifests); err != nil {
		return err
	}
	if err := readable(*manifests, "--manifests"); err != nil {
		return err
	}
	if *annotation != "" {
		if err := readable(*annotation, "--annotation"); err != nil {
			return err
		}
	}
	out, err := config.Deploy(*manifests, *annotation, *env)
	if err != nil {
		return err
	}
	_, err = c.m.Stdout.Write(out)
	return err
}

// conceal is `varplane config conceal`.
func (c *ConfigCommand) conceal(args []string) error {
	fs := c.m.newFlagSet("config conceal", "[flags] NAME=value…", `
Turn NAME=value secrets into the variables the consumers read
(VARPLANE_CONFIGURATION__NAME): an env file (--env-file, for docker --env-file
or kubectl create secret generic --from-env-file) and a Kubernetes Secret
named "configuration" (--kubernetes, for envFrom). Without either flag the env
file is printed on stdout. Files are written with mode 0600.

To keep a secret out of shell history and the process list, NAME=@PATH reads
the value from the file PATH and NAME=- from standard input (once); one
trailing line break is dropped. NAME=@@… gives a literal value starting
with '@'. No message ever shows a value.

With --components (a deployment declaration), every secret its defaults
reference must be given: a missing one is exit status 1 and nothing is
written. Flags and assignments may come in any order.`)
	components := fs.String("components", "", "deployment declaration whose referenced secrets must all be given")
	namespace := fs.String("namespace", "", "Kubernetes namespace of the Secret (none when empty)")
	envFile := fs.String("env-file", "", "write the env file here")
	k8s := fs.String("kubernetes", "", "write the Kubernetes Secret manifest (YAML) here")
	// An unknown flag is refused here rather than by the flag package,
	// which would print it: it may be a secret given without its NAME=.
	for i := 0; i < len(args) && args[i] != "--"; i++ {
		name, ok := flagName(args[i])
		switch {
		case !ok || name == "h" || name == "help":
		case fs.Lookup(name) == nil:
			return usagef("config conceal: argument %d is neither a flag of conceal nor NAME=value (not shown: it may be a secret)", i+1)
		case !strings.Contains(args[i], "="):
			i++ // every flag of conceal takes a value: skip it
		}
	}
	assignments, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(assignments) == 0 {
		return usagef("config conceal: give at least one NAME=value")
	}
	var dep *config.Deployment
	if *components != "" {
		if err := readable(*components, "--components"); err != nil {
			return err
		}
		if dep, err = config.LoadDeployment(*components); err != nil {
			return err
		}
	}
	values, err := secret.ParseAssignments(assignments, secret.Inputs{
		Stdin: c.m.Stdin,
		Open:  func(path string) (io.ReadCloser, error) { return os.Open(path) },
	})
	if err != nil {
		return &usageError{err: err}
	}
	out, err := config.ConcealValues(dep, *namespace, values)
	if err != nil {
		return &usageError{err: err}
	}
	if len(out.Missing) > 0 {
		return &refusedError{msg: fmt.Sprintf("error: %s references secrets that are not given: %s", *components, strings.Join(out.Missing, ", "))}
	}
	if *envFile == "" && *k8s == "" {
		_, err := c.m.Stdout.Write(out.EnvFile)
		return err
	}
	var wrote []string
	for _, f := range []struct {
		path string
		data []byte
	}{{*envFile, out.EnvFile}, {*k8s, out.Kubernetes}} {
		if f.path == "" {
			continue
		}
		if err := atomicfile.WritePrivate(f.path, f.data); err != nil {
			return err
		}
		wrote = append(wrote, f.path)
	}
	// Names only: the values are secrets.
	fmt.Fprintf(c.m.Stdout, "wrote %d secret(s) (%s) to %s\n", len(out.Names), strings.Join(out.Names, ", "), strings.Join(wrote, " and "))
	return nil
}

// parseInterspersed parses fs from args where flags and positional
// arguments may alternate (`conceal A=1 --env-file f B=2`), and returns the
// positional ones. Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	if i := indexOf(args, "--"); i >= 0 {
		args, rest = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{err: err, reported: true}
		}
		left := fs.Args()
		if len(left) == 0 {
			break
		}
		pos = append(pos, left[0])
		args = left[1:]
	}
	return append(pos, rest...), nil
}

// flagName returns the name of a flag argument ("-x", "--x", "--x=v"), and
// false for anything else ("-" and "--" included).
func flagName(arg string) (string, bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return "", false
	}
	name := strings.TrimPrefix(arg[1:], "-")
	name, _, _ = strings.Cut(name, "=")
	return name, name != ""
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// readable turns a missing or unreadable input into a usage error (exit 2),
// so that exit 1 keeps meaning "the input was read and is invalid".
func readable(path, flagName string) error {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return usagef("%s: %v", flagName, err)
		}
	}
	return nil
}
