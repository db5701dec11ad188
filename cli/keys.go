package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/seal"
)

// runKeys is loopgate keys: key pairs approvers sign approvals with.
//
//	loopgate keys new [--out FILE]   a new user nkey pair
//	loopgate keys public FILE        the public key of a seed file
func runKeys(ctx context.Context, e env, args []string) int {
	usage := func() {
		fmt.Fprintln(e.stderr, "usage: loopgate keys new [--out FILE]    make an approver's key pair (nkey, ed25519)")
		fmt.Fprintln(e.stderr, "       loopgate keys public FILE         print the public key of a seed file")
		fmt.Fprintln(e.stderr, "       loopgate keys seal-new [--out FILE]   make a key-encryption key for sealed arguments (redaction.seal_key_file)")
		fmt.Fprintln(e.stderr, "       loopgate keys shred TENANT --yes [--nats URL]   delete a tenant's data key: its sealed values become unrecoverable")
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
	case "seal-new":
		return keysSealNew(e, args[1:])
	case "shred":
		return keysShred(ctx, e, args[1:])
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

// keysSealNew is loopgate keys seal-new: a new key-encryption key for
// sealed arguments, printed or written to a new file readable by its
// owner only.
func keysSealNew(e env, args []string) int {
	fs := flag.NewFlagSet("loopgate keys seal-new", flag.ContinueOnError)
	out := fs.String("out", "", "write the key to this new file, mode 0600 (redaction.seal_key_file)")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: loopgate keys seal-new [--out FILE]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, e, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return exitError
	}
	text := []byte(seal.NewKeyText() + "\n")
	if *out == "" {
		fmt.Fprintln(e.stdout, "# key-encryption key: give it to the workers in a file (redaction.seal_key_file) or as "+seal.EnvKey)
		e.stdout.Write(text)
		return exitOK
	}
	if err := writeSeed(*out, text); err != nil {
		return fail(e, "keys seal-new: %v", err)
	}
	fmt.Fprintf(e.stderr, "key written to %s (mode 0600); name it in redaction.seal_key_file\n", *out)
	return exitOK
}

// keysShred is loopgate keys shred: delete a tenant's data key from the
// loopgate_keys bucket, making every value sealed under it unrecoverable
// (the erasure path for personal data). The events stay readable.
func keysShred(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("loopgate keys shred", flag.ContinueOnError)
	natsURL := fs.String("nats", defaultNATS, "NATS URL of a running loopgate")
	yes := fs.Bool("yes", false, "required: the sealed values of the tenant are lost for good")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: loopgate keys shred TENANT --yes [--nats URL]")
		fs.PrintDefaults()
	}
	pos, code, ok := parseInterspersed(fs, e, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fs.Usage()
		return exitError
	}
	tenant := pos[0]
	switch {
	case !events.ValidToken(tenant):
		return fail(e, "keys shred: tenant %q is not a valid subject token", tenant)
	case !*yes:
		return fail(e, "keys shred: every value sealed for tenant %s becomes unrecoverable, and calls waiting on them end args_lost: add --yes to go ahead", tenant)
	}
	nc, js, _, err := connect(ctx, *natsURL)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer nc.Close()
	kv, err := js.KeyValue(ctx, journal.BucketKeys)
	if err != nil {
		return fail(e, "keys shred: open bucket %s: %v", journal.BucketKeys, cmp.Or(refusal(nc, err), err))
	}
	if err := seal.NewKeyring(kv, nil).Shred(ctx, tenant); err != nil {
		return fail(e, "keys shred: %v", cmp.Or(refusal(nc, err), err))
	}
	fmt.Fprintf(e.stdout, "the data key of tenant %s is deleted: its sealed values are unrecoverable; the events stay readable\n", tenant)
	return exitOK
}
