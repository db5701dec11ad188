package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
)

// runKeys is loopgate keys: key pairs approvers sign approvals with.
//
//	loopgate keys new [--out FILE]   a new user nkey pair
//	loopgate keys public FILE        the public key of a seed file
func runKeys(ctx context.Context, e env, args []string) int {
	usage := func() {
		fmt.Fprintln(e.stderr, "usage: loopgate keys new [--out FILE]    make an approver's key pair (nkey, ed25519)")
		fmt.Fprintln(e.stderr, "       loopgate keys public FILE         print the public key of a seed file")
	}
	if len(args) == 0 {
		usage()
		return exitError
	}
	switch args[0] {
	case "new":
		return keysNew(e, args[1:])
	case "public":
		return keysPublic(e, args[1:])
	case "-h", "--help", "help":
		usage()
		return exitOK
	}
	fmt.Fprintf(e.stderr, "loopgate keys: unknown subcommand %q\n", args[0])
	usage()
	return exitError
}

// keysNew makes a user key pair. With --out the seed goes to a new file
// (mode 0600, never over an existing one) and only the public key to
// stdout, so `loopgate keys new --out k.nk` can feed a config; without it
// both are printed.
func keysNew(e env, args []string) int {
	fs := flag.NewFlagSet("loopgate keys new", flag.ContinueOnError)
	out := fs.String("out", "", "write the seed (the private key) to this new file, mode 0600, and print only the public key")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: loopgate keys new [--out FILE]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, e, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return exitError
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return fail(e, "keys new: %v", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return fail(e, "keys new: %v", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return fail(e, "keys new: %v", err)
	}
	defer wipe(seed)
	if *out == "" {
		fmt.Fprintln(e.stdout, "# public key: put it in the config, policy.approvers.<id>.public_key")
		fmt.Fprintln(e.stdout, pub)
		fmt.Fprintln(e.stdout, "# seed: the private key; keep it in a file only its owner reads (loopgate approve --key FILE)")
		fmt.Fprintln(e.stdout, string(seed))
		return exitOK
	}
	if err := writeSeed(*out, seed); err != nil {
		return fail(e, "keys new: %v", err)
	}
	fmt.Fprintln(e.stdout, pub)
	fmt.Fprintf(e.stderr, "seed written to %s (mode 0600); put the public key above in policy.approvers.<id>.public_key\n", *out)
	return exitOK
}

// writeSeed writes seed to a new file readable by its owner only.
func writeSeed(name string, seed []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: not overwriting a key", name)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(seed)
	if err == nil {
		_, err = f.Write([]byte("\n"))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

func keysPublic(e env, args []string) int {
	if len(args) != 1 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(e.stderr, "usage: loopgate keys public FILE")
		if len(args) == 1 {
			return exitOK
		}
		return exitError
	}
	kp, err := readKey(e, args[0])
	if err != nil {
		return fail(e, "keys public: %v", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return fail(e, "keys public: %v", err)
	}
	fmt.Fprintln(e.stdout, pub)
	return exitOK
}

// readKey reads an approver's user key pair from a seed file, warning on
// stderr when others may read the file.
func readKey(e env, name string) (nkeys.KeyPair, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, fmt.Errorf("key %w", err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(e.stderr, "loopgate: warning: key file %s is readable by others (mode %04o); chmod 600 it\n", name, fi.Mode().Perm())
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("key %w", err)
	}
	defer wipe(b)
	kp, err := approvals.ParseSeed(b)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", name, err)
	}
	return kp, nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}
