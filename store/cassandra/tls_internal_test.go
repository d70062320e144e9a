package cassandra

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCA makes a CA and a server certificate for dnsName signed by it, and
// writes the CA to a PEM file.
func testCA(t *testing.T, dir, name, dnsName string) (caFile string, server tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, name+".pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
}

// TestTLSVerification: host verification on checks chain and name; off
// checks the chain only, never nothing.
func TestTLSVerification(t *testing.T) {
	dir := t.TempDir()
	caFile, srvCert := testCA(t, dir, "ca", "node1.example")
	otherCA, _ := testCA(t, dir, "other", "node1.example")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{srvCert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	handshake := func(cfg Config, serverName string) error {
		cfg.Hosts = []string{"127.0.0.1"}
		r, err := cfg.resolve()
		if err != nil {
			return err
		}
		tc, err := r.tlsConfig()
		if err != nil {
			return err
		}
		tc = tc.Clone()
		if !tc.InsecureSkipVerify {
			tc.ServerName = serverName // what the driver sets from the host dialled
		}
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer raw.Close()
		return tls.Client(raw, tc).Handshake()
	}
	cases := []struct {
		name    string
		cfg     Config
		host    string
		succeed bool
	}{
		{"verify, right CA and name", Config{CAFile: caFile}, "node1.example", true},
		{"verify, wrong name", Config{CAFile: caFile}, "127.0.0.1", false},
		{"verify, wrong CA", Config{CAFile: otherCA}, "node1.example", false},
		{"skip host, right CA, wrong name", Config{CAFile: caFile, SkipHostVerification: true}, "127.0.0.1", true},
		{"skip host, wrong CA", Config{CAFile: otherCA, SkipHostVerification: true}, "127.0.0.1", false},
		{"skip host, system roots", Config{TLS: true, SkipHostVerification: true}, "127.0.0.1", false},
	}
	for _, tc := range cases {
		err := handshake(tc.cfg, tc.host)
		if (err == nil) != tc.succeed {
			t.Errorf("%s: handshake error %v; want success %v", tc.name, err, tc.succeed)
		}
	}
	if _, err := (Config{Hosts: []string{"h"}, CAFile: filepath.Join(dir, "missing.pem")}).resolve(); err != nil {
		t.Fatalf("resolve does no I/O: %v", err)
	}
	r, _ := (Config{Hosts: []string{"h"}, CAFile: filepath.Join(dir, "missing.pem")}).resolve()
	if _, err := r.tlsConfig(); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
}
