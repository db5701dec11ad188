package natsconn

import "testing"

func TestRedactedURLsHideEveryCredential(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ given, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://worker:s3cret@10.0.0.1:4222", "nats://worker:xxxxx@10.0.0.1:4222"},
		{"nats://s3cret-token@10.0.0.1:4222", "nats://xxxxx@10.0.0.1:4222"},
		{"tls://a:pw@n1:4222, nats://n2:4222,nats://b:pw2@n3:4222", "tls://a:xxxxx@n1:4222, nats://n2:4222,nats://b:xxxxx@n3:4222"},
		{"user:pw@host:4222", "nats://user:xxxxx@host:4222"},
		{"nats://u:p%zz@h", "(a URL that does not parse, credentials hidden)"},
	} {
		if got := RedactedURLs(tc.given); got != tc.want {
			t.Errorf("RedactedURLs(%q) = %q, want %q", tc.given, got, tc.want)
		}
	}
}
