package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// prompter asks a human questions on the injected streams, one answer a
// line. Lines are read by one goroutine, started at the first question, so
// a question gives up when ctx is done; stop releases it. Not safe for
// concurrent questions.
type prompter struct {
	in    io.Reader
	w     io.Writer
	echo  bool // stdin is not a terminal: echo answers so the transcript reads as typed
	once  sync.Once
	lines chan string
	done  chan struct{}
}

func newPrompter(in io.Reader, w io.Writer) *prompter {
	return &prompter{in: in, w: w, echo: !isTerminalReader(in), done: make(chan struct{})}
}

// ask prints question (without a newline) and returns the next line of
// input, trimmed. ok is false at the end of input (or with no input).
func (p *prompter) ask(ctx context.Context, question string) (answer string, ok bool, err error) {
	fmt.Fprint(p.w, question)
	p.once.Do(p.start)
	select {
	case line, more := <-p.lines:
		if !more {
			fmt.Fprintln(p.w, "(no answer)")
			return "", false, nil
		}
		if p.echo {
			fmt.Fprintln(p.w, line)
		}
		return strings.TrimSpace(line), true, nil
	case <-ctx.Done():
		fmt.Fprintln(p.w)
		return "", false, ctx.Err()
	}
}

func (p *prompter) start() {
	p.lines = make(chan string)
	if p.in == nil {
		close(p.lines)
		return
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(p.in)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			case <-p.done:
				return
			}
		}
	}()
}

// stop lets the reading goroutine end once its read returns.
func (p *prompter) stop() {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
}

func isTerminalReader(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
