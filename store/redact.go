package store

import (
	"net/url"
	"regexp"
	"strings"

	"github.com/tenure-go/tenure/driver"
)

// redacted replaces a secret in URLs and messages.
const redacted = "xxxxx"

// Redact returns raw with its secrets replaced by "xxxxx", for messages and
// logs: the password of the user information in every form a user may
// write it (see passwordSpan), the value of every query parameter that
// holds a secret (password= in every scheme, and those that the scheme's
// store lists in Driver.Secrets, such as sslpassword= for PostgreSQL), and,
// in a string with no "://" (libpq's keyword/value settings, "host=db
// password=secret", quoted or not), the values of those keywords. It works
// on URLs that do not parse, and on any scheme.
func Redact(raw string) string {
	s := raw
	if ps, pe, ok := passwordSpan(raw); ok {
		// First, so that a '?' or '#' inside the password is gone before
		// the query is looked for.
		s = raw[:ps] + redacted + raw[pe:]
	}
	if !strings.Contains(s, "://") {
		s = keywordSecrets().ReplaceAllString(s, "${1}"+redacted)
	}
	secrets := secretParams(raw)
	rest, frag, hasFrag := strings.Cut(s, "#")
	base, query, hasQuery := strings.Cut(rest, "?")
	if hasQuery {
		params := strings.Split(query, "&")
		for i, p := range params {
			k, _, hasValue := strings.Cut(p, "=")
			if hasValue && secrets[paramName(k)] {
				params[i] = k + "=" + redacted
			}
		}
		base += "?" + strings.Join(params, "&")
	}
	if hasFrag {
		base += "#" + frag
	}
	return base
}

// passwordSpan returns where the password of raw's user information lies,
// raw[start:end], in every form a user may write it: scheme://user:pw@host;
// //user:pw@host; the scheme of a store with hosts with its slashes
// missing or short (postgres:user:pw@host, postgres:/user:pw@host); and no
// scheme at all, user:pw@host (the user reads as an unknown scheme). The
// user information ends at its last '@' (driver.Userinfo), so a password
// that holds an '@', '/', '?' or '#' is found whole. A store of files
// (sqlite:PATH) has no user information, whatever its path holds.
func passwordSpan(raw string) (start, end int, ok bool) {
	a := 0 // where the authority starts
	switch i := strings.Index(raw, "://"); {
	case i >= 0:
		a = i + 3
	case strings.HasPrefix(raw, "//"):
		a = 2
	default:
		if m := schemePrefix.FindString(raw); m != "" && knownScheme(raw) {
			if !hostScheme(raw) {
				return 0, 0, false
			}
			a = len(m)
			for a < len(raw) && raw[a] == '/' {
				a++
			}
		} else if isKeywordValue(raw) {
			return 0, 0, false
		}
	}
	info, ok := driver.Userinfo(raw[a:])
	if !ok {
		return 0, 0, false
	}
	c := strings.IndexByte(info, ':')
	if c < 0 {
		return 0, 0, false
	}
	return a + c + 1, a + len(info), true
}

// hostScheme reports whether raw's scheme is that of a registered store
// whose URLs name hosts (its usage line starts scheme://...), and so may
// carry user information.
func hostScheme(raw string) bool {
	e := schemeEntry(raw)
	if e == nil {
		return false
	}
	form, _, _ := strings.Cut(e.usage, " ")
	return strings.Contains(form, "://")
}

// isKeywordValue reports whether raw has no scheme and reads as
// keyword/value settings: "host=db user=u password=secret".
func isKeywordValue(raw string) bool {
	return schemePrefix.FindString(raw) == "" && !strings.Contains(raw, "://") &&
		keywordValue.MatchString(raw)
}

// keywordValue matches a string that starts with a keyword and "=".
var keywordValue = regexp.MustCompile(`^\s*[A-Za-z_][A-Za-z0-9_]*\s*=`)

// keywordSecrets returns a pattern that matches the value of every secret
// keyword (password, and the secret parameters of every registered store)
// in keyword/value settings, quoted values included (a quote inside one
// is doubled, or escaped with a backslash); group 1 is what comes before
// the value. Only messages use it: it is compiled on each call, so that a
// store registered later is covered.
func keywordSecrets() *regexp.Regexp {
	names := []string{"password"}
	mu.RLock()
	for _, e := range schemes {
		names = append(names, e.secrets...)
	}
	mu.RUnlock()
	for i, n := range names {
		names[i] = regexp.QuoteMeta(n)
	}
	return regexp.MustCompile(`(?i)((?:^|\s)(?:` + strings.Join(names, "|") + `)\s*=\s*)('(?:[^'\\]|\\.|'')*'?|(?:\\.|[^\s\\])*)`)
}

// schemeEntry returns the registered store of raw's scheme, or nil.
func schemeEntry(raw string) *entry {
	m := schemePrefix.FindStringSubmatch(raw)
	if m == nil {
		return nil
	}
	mu.RLock()
	defer mu.RUnlock()
	return schemes[strings.ToLower(m[1])]
}

// knownScheme reports whether raw starts with the scheme of a registered
// store.
func knownScheme(raw string) bool { return schemeEntry(raw) != nil }

// secretParams returns the names of the secret query parameters of raw's
// scheme: password, and those its driver lists.
func secretParams(raw string) map[string]bool {
	secrets := map[string]bool{"password": true}
	if e := schemeEntry(raw); e != nil {
		for _, s := range e.secrets {
			secrets[s] = true
		}
	}
	return secrets
}

// paramName is a query parameter's name, percent-decoded, lower case.
func paramName(k string) string {
	if d, err := url.QueryUnescape(k); err == nil {
		k = d
	}
	return strings.ToLower(k)
}

// secretValues returns the secrets that raw carries, as written and
// percent-decoded: the password of the user information and the values of
// the secret parameters.
func secretValues(raw string) []string {
	secrets := secretParams(raw)
	var out []string
	add := func(v string) {
		if v == "" {
			return
		}
		out = append(out, v)
		if d, err := url.QueryUnescape(v); err == nil && d != v && d != "" {
			out = append(out, d)
		}
		if d, err := url.PathUnescape(v); err == nil && d != v && d != "" {
			out = append(out, d)
		}
	}
	s := raw
	if ps, pe, ok := passwordSpan(raw); ok {
		add(raw[ps:pe])
		s = raw[:ps] + raw[pe:]
	}
	if !strings.Contains(s, "://") {
		for _, m := range keywordSecrets().FindAllStringSubmatch(s, -1) {
			v := m[2]
			add(v)
			if u := strings.Trim(v, "'\""); u != v {
				add(u)
			}
			if u := strings.ReplaceAll(v, "\\", ""); u != v {
				add(u)
			}
		}
	}
	rest, _, _ := strings.Cut(s, "#")
	_, query, _ := strings.Cut(rest, "?")
	for _, p := range strings.Split(query, "&") {
		if k, v, ok := strings.Cut(p, "="); ok && secrets[paramName(k)] {
			add(v)
		}
	}
	return out
}

// scrub returns err with every secret of raw replaced in its message; it
// still matches what err matches.
func scrub(raw string, err error) error {
	secrets := secretValues(raw)
	if len(secrets) == 0 {
		return err
	}
	msg := err.Error()
	clean := msg
	for _, s := range secrets {
		clean = strings.ReplaceAll(clean, s, redacted)
	}
	if clean == msg {
		return err
	}
	return &scrubbedError{msg: clean, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
