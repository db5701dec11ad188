package natsd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// writeConf writes a nats-server config file into a temp dir.
func writeConf(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const usersConf = `
server_name: from-file
listen: 127.0.0.1:1   # ignored: Config.Listen wins
jetstream { store_dir: "/nonexistent" }   # ignored: Config.StoreDir wins
accounts {
  APP {
    jetstream: enabled
    users: [
      {user: app, password: secret}
      {user: reader, password: secret, permissions: {publish: {deny: ">"}}}
    ]
  }
}
`

func TestConfigFileUsersAreRequiredBothWaysAndJetStreamWorks(t *testing.T) {
	t.Parallel()
	s := start(t, Config{ConfigFile: writeConf(t, usersConf), Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if s.ns.Name() != "from-file" {
		t.Errorf("server name %q, want the file's", s.ns.Name())
	}
	if strings.HasSuffix(s.ClientURL(), ":1") {
		t.Errorf("listening on %s: Config.Listen must win over the file", s.ClientURL())
	}
	// Anonymous: refused over TCP and in process alike.
	if nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("anonymous TCP connection accepted")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("anonymous TCP connection: %v, want an authorization violation", err)
	}
	if nc, err := s.Connect(nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("anonymous in-process connection accepted")
	}
	for _, viaTCP := range []bool{true, false} {
		var (
			nc  *nats.Conn
			err error
		)
		if viaTCP {
			nc, err = nats.Connect(s.ClientURL(), nats.UserInfo("app", "secret"))
		} else {
			nc, err = s.Connect(nats.UserInfo("app", "secret"))
		}
		if err != nil {
			t.Fatalf("connect as app (tcp=%v): %v", viaTCP, err)
		}
		js, _ := jetstream.New(nc)
		_, err = js.CreateOrUpdateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
		nc.Close()
		if err != nil {
			t.Errorf("JetStream in the file's account (tcp=%v): %v", viaTCP, err)
		}
	}
}

func TestConfigFileListenIsUsedWhenListenIsEmpty(t *testing.T) {
	t.Parallel()
	opts, err := Config{ConfigFile: writeConf(t, "listen: 127.0.0.2:4999\n"), StoreDir: "x"}.withDefaults().options()
	if err != nil {
		t.Fatal(err)
	}
	if opts.Host != "127.0.0.2" || opts.Port != 4999 {
		t.Errorf("listen %s:%d, want the file's 127.0.0.2:4999", opts.Host, opts.Port)
	}
	if !opts.JetStream || !opts.SyncAlways || opts.StoreDir != "x" || opts.ServerName != "loopgate" {
		t.Errorf("js %v always %v store %q name %q: loopgate's settings must apply over the file",
			opts.JetStream, opts.SyncAlways, opts.StoreDir, opts.ServerName)
	}
}

func TestBadConfigFileNamesTheField(t *testing.T) {
	t.Parallel()
	for _, path := range []string{
		filepath.Join(t.TempDir(), "missing.conf"),
		writeConf(t, "accounts { A { users: [ {user: "),
	} {
		_, err := Start(Config{ConfigFile: path, StoreDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "Config.ConfigFile") {
			t.Errorf("ConfigFile %s: got %v, want an error naming Config.ConfigFile", path, err)
		}
	}
}
