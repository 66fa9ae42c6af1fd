package config

import (
	"fmt"

	"github.com/varplane/varplane/config/secret"
)

// Concealed is what `varplane config conceal` writes for a set of secrets:
// an env file and a Kubernetes Secret manifest carrying the same variables.
type Concealed struct {
	EnvFile    []byte
	Kubernetes []byte
	// Names are the secrets written, sorted.
	Names []string
	// Missing are the secrets the deployment references that the
	// assignments do not give (nil without a deployment).
	Missing []string
}

// Conceal turns NAME=value assignments (the seed's `conceal configuration
// BAZ_VALUE=...`), taken literally, into the env file and the Kubernetes
// Secret; see ConcealValues. It fails on a malformed assignment, an invalid
// or repeated name, and a value the env file cannot carry.
func Conceal(dep *Deployment, namespace string, assignments []string) (*Concealed, error) {
	values, err := secret.ParseAssignments(assignments, secret.Inputs{})
	if err != nil {
		return nil, err
	}
	return ConcealValues(dep, namespace, values)
}

// ConcealValues turns secrets (name → value, as secret.ParseAssignments
// returns them) into the env file and the Kubernetes Secret (named
// "configuration", in namespace when non-empty) that deliver them to
// consumers as VARPLANE_CONFIGURATION__NAME. When dep is not nil, Missing
// lists the secrets it references that are not given. It fails on a value
// the env file cannot carry (a line break), naming the secret, never the
// value.
func ConcealValues(dep *Deployment, namespace string, values map[string]string) (*Concealed, error) {
	env, err := secret.EnvFile(values)
	if err != nil {
		return nil, err
	}
	k8s, err := secret.KubernetesManifest(namespace, values)
	if err != nil {
		return nil, fmt.Errorf("render secret manifest: %w", err)
	}
	out := &Concealed{EnvFile: env, Kubernetes: k8s, Names: sortedKeys(values)}
	if dep != nil {
		for _, n := range dep.Secrets() {
			if _, ok := values[n]; !ok {
				out.Missing = append(out.Missing, n)
			}
		}
	}
	return out, nil
}
