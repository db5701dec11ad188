package natsauth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/natsd"
)

// writeTLSFiles makes a CA and a server certificate for 127.0.0.1 signed
// by it, and returns the paths of the CA, the certificate and its key.
func writeTLSFiles(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "natsauth test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// The README's TLS option: the example with its tls block filled in.
func TestWithTLSClientsNeedTheCAAndServeConnectsInProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, cert, key := writeTLSFiles(t, dir)
	base, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	tlsBlock := fmt.Sprintf("\ntls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  timeout: 2\n}\n", cert, key, ca)
	if err := os.WriteFile(conf, append(base, tlsBlock...), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := natsd.Start(natsd.Config{ConfigFile: conf, Listen: "127.0.0.1:0", StoreDir: t.TempDir(),
		SyncInterval: "2m", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("start with TLS: %v", err)
	}
	t.Cleanup(srv.Shutdown)

	// loopgate serve's own connection: in process, no TLS to set up.
	w, err := srv.Connect(nats.UserInfo(roleWorker, passwords[roleWorker]), nats.CustomInboxPrefix(inboxPrefix(roleWorker)))
	if err != nil {
		t.Fatalf("in-process connection as worker: %v", err)
	}
	defer w.Close()
	wjs, _ := jetstream.New(w)
	if err := journal.Ensure(t.Context(), wjs, journal.Layout{}); err != nil {
		t.Fatalf("ensure in process: %v", err)
	}

	// Over TCP, a client that does not trust the CA is turned away...
	if nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(roleAuditor, passwords[roleAuditor]), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("a client without the CA connected")
	}
	// ...and one that does is in, still only as its role.
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(roleAuditor, passwords[roleAuditor]),
		nats.CustomInboxPrefix(inboxPrefix(roleAuditor)), nats.RootCAs(ca))
	if err != nil {
		t.Fatalf("connect with the CA: %v", err)
	}
	defer nc.Close()
	if !nc.TLSRequired() {
		t.Error("the connection is not TLS")
	}
	js, _ := jetstream.New(nc)
	if _, err := js.Stream(t.Context(), journal.StreamEvents); err != nil {
		t.Errorf("read %s as auditor over TLS: %v", journal.StreamEvents, err)
	}
}
