// Package ops holds the operations the Go executor serves, in named sets chosen with
// --plugins: "builtin" (text.normalize@1, artifact.chunk@1, bench.noop@1), "conformance"
// (the probes of `rara executor-conformance`) and "chaos" (the field smoke's effect op).
package ops

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"rara.local/executor/go/executor"
)

// Sets maps a --plugins name to its registration.
var Sets = map[string]func(*executor.Registry){
	"builtin":     RegisterBuiltin,
	"conformance": RegisterConformance,
	"chaos":       RegisterChaos,
}

// Register adds the named sets to registry.
func Register(registry *executor.Registry, names []string) error {
	for _, name := range names {
		set, ok := Sets[name]
		if !ok {
			known := make([]string, 0, len(Sets))
			for k := range Sets {
				known = append(known, k)
			}
			sort.Strings(known)
			return fmt.Errorf("unknown operation set %q (known: %s)", name,
				strings.Join(known, ", "))
		}
		set(registry)
	}
	return nil
}

// number reads a JSON number field, or def when absent; a wrong type is a non-retryable error.
func number(input map[string]any, key string, def float64) (float64, error) {
	v, ok := input[key]
	if !ok || v == nil {
		return def, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, executor.Failed(fmt.Sprintf("payload.%s must be a number", key), false)
	}
	f, err := n.Float64()
	if err != nil {
		return 0, executor.Failed(fmt.Sprintf("payload.%s: %v", key, err), false)
	}
	return f, nil
}

func boolean(input map[string]any, key string) bool {
	b, _ := input[key].(bool)
	return b
}

func str(input map[string]any, key, def string) string {
	if s, ok := input[key].(string); ok {
		return s
	}
	return def
}
