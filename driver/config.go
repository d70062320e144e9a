package driver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// The helpers below check the parts of a store configuration that every
// store shares, so that each store applies the same rules: a port is 1 to
// 65535, a CA file holds PEM certificates, a client certificate comes with
// its key. They read local files at most; they never connect.

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
