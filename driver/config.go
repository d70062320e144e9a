package driver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The helpers below check the parts of a store configuration that every
// store shares, so that each store applies the same rules: a port is 1 to
// 65535, a CA file holds PEM certificates, a client certificate comes with
// its key. They read local files at most; they never connect.

// ParsePort parses a TCP port number: 1 to 65535, digits only.
func ParsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return p, nil
}

// Userinfo returns the user information ("user:password") that starts
// rest, the part of a URL after "scheme://", as a user may have written
// it: up to the last '@' before the host, even where a password holds an
// '@', '/', '?' or '#' that is not percent-encoded (RFC 3986 allows none
// there, but a password pasted into a URL often has one). A '/', '?' or
// '#' ends the authority unless an '@' comes after it with no '=' in
// between: an '@' in a query value ("?client_name=a@b") is not user
// information. ok is false when there is none.
func Userinfo(rest string) (info string, ok bool) {
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	for i := end; i < len(rest) && rest[i] != '='; i++ {
		if rest[i] == '@' {
			at = i
		}
	}
	if at < 0 {
		return "", false
	}
	return rest[:at], true
}

// CheckUserinfo returns an error when the user information of a store URL
// (scheme://user:password@host...) holds an '@', '/', '?' or '#' that is
// not percent-encoded. Parsers split such a URL in different places (Go's
// net/url at the first '/' and the last '@', pgx at the first '@'), so
// part of a password could be taken for a host name, a port or a path,
// used, and shown in an error. The error does not show the URL.
func CheckUserinfo(raw string) error {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil
	}
	if info, ok := Userinfo(rest); ok && strings.ContainsAny(info, "@/?#") {
		return errors.New("the user name or password holds an '@', '/', '?' or '#': percent-encode it (%40, %2F, %3F, %23)")
	}
	return nil
}

// LoadTLS returns a TLS configuration (TLS 1.2 or later) that verifies
// servers with the PEM certificate authorities in caFile (the system's when
// caFile is empty) and presents the PEM client certificate certFile with
// its key keyFile (none when both are empty; giving one without the other
// is an error). Errors name the file and what is wrong with it; they never
// contain a file's contents.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate needs both a certificate file and a key file")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// OpenURL is the body of a store package's OpenURL: raw parsed with the
// package's ParseURL (parse), then opened with its Open (open).
func OpenURL[C, S any](ctx context.Context, raw string, parse func(string) (C, error), open func(context.Context, C) (S, error)) (S, error) {
	cfg, err := parse(raw)
	if err != nil {
		var zero S
		return zero, err
	}
	return open(ctx, cfg)
}
