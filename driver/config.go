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

// CheckUserinfo returns an error when the user information of a store URL
// (scheme://user:password@host...) holds an '@' that is not
// percent-encoded. RFC 3986 allows none there, and parsers split such an
// authority at different '@'s (Go's net/url at the last, pgx at the
// first), so part of a password could be taken for the host name, looked
// up, and shown in an error. The error does not show the URL.
func CheckUserinfo(raw string) error {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if strings.Count(rest, "@") > 1 {
		return errors.New("the user name or password holds an '@': write it as %40")
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
