package store

import (
	"net/url"
	"regexp"
	"strings"
)

// redacted replaces a secret in URLs and messages.
const redacted = "xxxxx"

// Redact returns raw with its secrets replaced by "xxxxx", for messages and
// logs: the password of the user information (scheme://user:password@host,
// and scheme:user:password@host with the slashes forgotten) and the value
// of every query parameter that holds a secret: password= in every scheme,
// and those that the scheme's store lists in Driver.Secrets (sslpassword=
// for PostgreSQL). A string with no scheme that reads as keyword/value
// settings (libpq's "host=db password=secret") has the values of those
// keywords replaced too. It works on URLs that do not parse, and on any
// scheme.
func Redact(raw string) string {
	if isKeywordValue(raw) {
		return keywordSecrets().ReplaceAllString(raw, "${1}"+redacted)
	}
	secrets := secretParams(raw)
	rest, frag, hasFrag := strings.Cut(raw, "#")
	base, query, hasQuery := strings.Cut(rest, "?")
	if scheme, after, ok := strings.Cut(base, "://"); ok {
		base = scheme + "://" + redactAuthority(after)
	} else if after, ok := strings.CutPrefix(base, "//"); ok {
		// No scheme: "//user:password@host/..."
		base = "//" + redactAuthority(after)
	} else if m := schemePrefix.FindString(base); m != "" && knownScheme(base) {
		// A known scheme without its slashes: "postgres:user:password@host".
		base = m + redactAuthority(base[len(m):])
	} else {
		// A URL whose scheme was forgotten ("user:password@host/db"
		// reads as scheme "user"), or any other unknown form.
		base = redactAuthority(base)
	}
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
// is doubled, or escaped with a backslash);
// group 1 is what comes before the value.
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
	return regexp.MustCompile(`(?i)((?:^|\s)(?:` + strings.Join(names, "|") + `)\s*=\s*)('(?:[^'\\]|\\.|'')*'?|[^\s]*)`)
}

// redactAuthority replaces the password of the user information that
// starts s (user:password@host, up to the first slash).
func redactAuthority(s string) string {
	authority, path := s, ""
	if i := strings.IndexByte(s, '/'); i >= 0 {
		authority, path = s[:i], s[i:]
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		if user, _, hasPass := strings.Cut(authority[:at], ":"); hasPass {
			authority = user + ":" + redacted + authority[at:]
		}
	}
	return authority + path
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
	if isKeywordValue(raw) {
		for _, m := range keywordSecrets().FindAllStringSubmatch(raw, -1) {
			v := m[2]
			add(v)
			if u := strings.Trim(v, "'"); u != v {
				add(u)
			}
		}
		return out
	}
	rest, _, _ := strings.Cut(raw, "#")
	base, query, _ := strings.Cut(rest, "?")
	after, ok := "", false
	if _, after, ok = strings.Cut(base, "://"); !ok {
		if m := schemePrefix.FindString(base); m != "" && knownScheme(base) {
			after, ok = base[len(m):], true // "postgres:user:password@host"
		}
	}
	if ok {
		authority, _, _ := strings.Cut(after, "/")
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			if _, pass, hasPass := strings.Cut(authority[:at], ":"); hasPass {
				add(pass)
			}
		}
	}
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
