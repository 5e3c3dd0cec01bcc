package executor

// Secrets travel by reference (secretRef) and are resolved inside an operation; a value in a
// payload, result or checkpoint would be persisted in PostgreSQL by the worker and printed in
// logs. The same screen as rara/secrets.py: the same patterns (RE2 is linear-time, so the
// possessive quantifiers the Python patterns need against backtracking are plain ones here)
// and the same sensitive key names.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Mask replaces a credential-looking value in anything that leaves the executor.
const Mask = "[REDACTED]"

var credentialPatterns = []struct {
	what string
	re   *regexp.Regexp
}{
	{"private key", regexp.MustCompile(`-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----`)},
	{"AWS access key id", regexp.MustCompile(`\b(AKIA|ASIA)[0-9A-Z]{16}\b`)},
	{"GitHub token", regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{36,}\b`)},
	{"Slack token", regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`)},
	{"OpenAI-style API key", regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{20,}`)},
	{"Hugging Face token", regexp.MustCompile(`\bhf_[A-Za-z0-9]{30,}\b`)},
	{"JSON web token", regexp.MustCompile(
		`\beyJ[A-Za-z0-9_-]{10,256}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}`)},
	{"password in URL", regexp.MustCompile(`\b[a-z][a-z0-9+.-]{0,31}://[^/\s:@]+:[^/\s@]+@`)},
	{"password assignment", regexp.MustCompile(
		`(?i)\b(password|passwd|secret|api[_-]?key|access[_-]?token)\s*[=:]\s*['"]?[^\s'"]{6,}`)},
}

var sensitiveKey = regexp.MustCompile(`(?i)^(password|passwd|secret|token|api[_-]?key|` +
	`private[_-]?key|access[_-]?key|client[_-]?secret|authorization)$`)

// findCredentials: the JSON paths ($.a.b[2]) of values that look like credentials.
func findCredentials(value any, path string, found []string) []string {
	switch v := value.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			child := path + "." + k
			if s, ok := v[k].(string); ok && s != "" && sensitiveKey.MatchString(k) {
				found = append(found, fmt.Sprintf("%s (a '%s' field)", child, k))
			} else {
				found = findCredentials(v[k], child, found)
			}
		}
	case []any:
		for i, item := range v {
			found = findCredentials(item, fmt.Sprintf("%s[%d]", path, i), found)
		}
	case string:
		for _, p := range credentialPatterns {
			if p.re.MatchString(v) {
				return append(found, fmt.Sprintf("%s (looks like a %s)", path, p.what))
			}
		}
	}
	return found
}

// CredentialProblem names where credential-looking values sit in value (never the values),
// or returns "". value is JSON-shaped (maps, slices, strings…); anything else is screened
// through its JSON form.
func CredentialProblem(value any, what string) string {
	switch value.(type) {
	case map[string]any, []any, string, nil:
	default:
		if data, err := json.Marshal(value); err == nil {
			var generic any
			if json.Unmarshal(data, &generic) == nil {
				value = generic
			}
		}
	}
	found := findCredentials(value, "$", nil)
	if len(found) == 0 {
		return ""
	}
	return fmt.Sprintf("%s holds what looks like a secret at %s; secrets travel by reference "+
		"(secretRef), never by value", what, strings.Join(found, ", "))
}

// Redact masks credential-looking text.
func Redact(text string) string {
	for _, p := range credentialPatterns {
		text = p.re.ReplaceAllString(text, Mask)
	}
	return text
}
