// Package natsconn holds what every long-lived connection of loopgate to
// an external NATS server needs beyond its address and credentials: to
// notice a server that stopped answering, and to say so.
package natsconn

import (
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// A server that stops answering without closing its connections (frozen
// by SIGSTOP or a stalled VM, cut off by a network that drops packets
// rather than refusing them) is noticed only by the client's pings. With
// nats.go's defaults, a ping every 2 minutes and 2 unanswered allowed, a
// worker sat on such a server for 4 to 6 minutes, with every run it held
// (make soak's TestAFrozenServerIsLeft finished none of 200 runs in the
// 90 s after the freeze). With these a connection leaves after 6 to 8 s
// for another server of its list, about as long as a cluster takes to
// elect new leaders in place of the frozen server's. A ping is a few
// bytes each way; a server too busy to answer one within 6 s is no better
// than a frozen one.
const (
	PingInterval = 2 * time.Second
	MaxPingsOut  = 3
)

// Pings returns the options that ping the server every PingInterval and
// give it up after MaxPingsOut unanswered pings.
func Pings() []nats.Option {
	return []nats.Option{nats.PingInterval(PingInterval), nats.MaxPingsOutstanding(MaxPingsOut)}
}

// Liveness returns Pings and the options that log (to log) the server
// first connected to, each connection lost with its cause, and each
// reconnection with its server: with a list of URLs, or one URL of a
// cluster, which server a process is on is otherwise nowhere to be seen.
func Liveness(log *slog.Logger) []nats.Option {
	var (
		mu     sync.Mutex
		server string // the last server connected to, for the loss's log
	)
	remember := func(nc *nats.Conn) {
		mu.Lock()
		server = nc.ConnectedUrlRedacted()
		mu.Unlock()
	}
	return append(Pings(),
		nats.ConnectHandler(func(nc *nats.Conn) {
			remember(nc)
			log.Info("nats: connected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				return // closed by this process: nothing was lost
			}
			mu.Lock()
			from := server
			mu.Unlock()
			log.Warn("nats: lost the connection to the server; reconnecting", "server", from, "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			remember(nc)
			log.Info("nats: reconnected", "server", nc.ConnectedUrlRedacted())
		}),
	)
}

// RedactedURLs returns list, NATS URLs separated by commas as nats.Connect
// takes them, with the credentials of each replaced by "xxxxx": a
// password, or the token of a URL with a user part only. An error about
// a connection that failed names its URLs, and the URL given with
// --nats or $NATS_URL may well carry them.
func RedactedURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		s := strings.TrimSpace(p)
		if !strings.Contains(s, "://") {
			s = "nats://" + s // as nats.Connect reads a bare host:port
		}
		u, err := url.Parse(s)
		switch {
		case err != nil:
			if strings.Contains(p, "@") {
				parts[i] = "(a URL that does not parse, credentials hidden)"
			}
		case u.User == nil:
		default:
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			} else {
				u.User = url.User("xxxxx")
			}
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
