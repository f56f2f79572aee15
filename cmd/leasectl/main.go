// Command leasectl is the command-line client of leasegate: it acquires,
// renews, releases and inspects locks, runs a command while holding a lock
// or leading an election, and evicts holders as an administrator.
// "leasectl --help" lists its commands and exit statuses (the exit*
// constants below).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasegate/leasegate/client"
)

// Exit statuses. run and elect otherwise exit with the command's status,
// or 128+N when stop signal N came before the command started.
const (
	exitError       = 1 // for example no gateway reachable
	exitUsage       = 2 // bad flags or arguments, including ones a gateway refuses
	exitNotAcquired = 3 // held, or the wait timed out; for leader: nobody leads
	exitLost        = 4 // the lock (or leadership) was lost
	exitRefused     = 5 // the tenant may not use the name, or the lock id is not the caller's: client.ErrPermissionDenied, ErrNotOwner, ErrLimitMismatch
	exitLimited     = 6 // a rate limit or a quota: client.ErrRateLimited, ErrQuotaExceeded
	exitInternal    = 7 // the gateway failed unexpectedly (a bug or a version mismatch, not an outage): client.ErrInternal
)

// usageError marks bad flags or arguments.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitStatus ends leasectl with code, printing err (if any) first.
type exitStatus struct {
	code int
	err  error
}

func (e exitStatus) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e exitStatus) Unwrap() error { return e.err }

func main() {
	if len(os.Args) > 1 && os.Args[1] == superviseArg {
		os.Exit(supervise(os.Args[2:]))
	}
	// SIGTERM is never ignored at start (the Go runtime catches it), so
	// the list is never empty, which would mean every signal.
	ctx, stop := signal.NotifyContext(context.Background(), unlessIgnored(os.Interrupt, syscall.SIGTERM)...)
	err := newRootCmd(os.Stdout).ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode prints err as one line and maps it to an exit status.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var st exitStatus
	if errors.As(err, &st) {
		if st.err != nil {
			fmt.Fprintln(stderr, "leasectl: "+firstLine(st.err.Error()))
		}
		return st.code
	}
	code, hint := classify(err)
	fmt.Fprintln(stderr, "leasectl: "+firstLine(err.Error())+hint)
	return code
}

// classify maps err to an exit status and a hint to append to its message.
func classify(err error) (code int, hint string) {
	var ue usageError
	switch {
	case errors.As(err, &ue), errors.Is(err, client.ErrInvalidArgument):
		return exitUsage, ""
	case errors.Is(err, client.ErrNotAcquired), errors.Is(err, client.ErrWaitTimeout), errors.Is(err, client.ErrNoLeader):
		return exitNotAcquired, ""
	case errors.Is(err, client.ErrLockLost), errors.Is(err, client.ErrReleased):
		return exitLost, ""
	case errors.Is(err, client.ErrPermissionDenied), errors.Is(err, client.ErrNotOwner):
		return exitRefused, ""
	case errors.Is(err, client.ErrLimitMismatch):
		return exitRefused, " (give the name's limit with --limit, or wait until it has no holders or waiters)"
	case errors.Is(err, client.ErrRateLimited):
		// The gateway's message, in err's, says when to retry.
		return exitLimited, ""
	case errors.Is(err, client.ErrQuotaExceeded):
		return exitLimited, " (try again once some of the tenant's locks or waits end)"
	case errors.Is(err, client.ErrInternal):
		return exitInternal, " (the gateway's logs say more)"
	}
	return exitError, ""
}

// firstLine is the first line of an error message, without the SDK's
// "leasegate: " prefix (leasectl prints its own), safe for a terminal
// (termSafe): a message may echo what a gateway or a caller sent.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return termSafe(strings.TrimPrefix(s, "leasegate: "))
}

// globals are the flags every command shares.
type globals struct {
	endpoints []string
	output    string
	clientID  string
	protocol  string
	timeout   time.Duration
	creds     credentials
	stdout    io.Writer
	stderr    io.Writer // progress lines
}

const defaultEndpoint = "http://127.0.0.1:7070"

func newRootCmd(stdout io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: os.Stderr}
	cmd := &cobra.Command{
		Use:   "leasectl",
		Short: "Command-line client for the leasegate lock gateway",
		Long: `leasectl acquires, renews, releases and describes leasegate locks, lists them
(ls) and their queues (queue), streams their events (watch), evicts a holder as
an administrator (force-release, audit), and runs a command while holding a
lock (see "leasectl run --help"). It also campaigns in elections and runs a
command while leader ("leasectl elect"), and shows or follows an election's
leader ("leader", "observe").

Gateways come from --endpoint (repeatable) or, when no --endpoint is given,
from LEASEGATE_ENDPOINT (URLs separated by commas or spaces); the default is
` + defaultEndpoint + `. Calls fail over between them.

A gateway with authentication on needs credentials: a bearer token (a static
token or a JWT) from --token, --token-file or LEASEGATE_TOKEN /
LEASEGATE_TOKEN_FILE, or a client certificate from --cert and --key
(LEASEGATE_CERT, LEASEGATE_KEY). --cacert (LEASEGATE_CACERT) names the CA of an
https:// gateway's certificate when the system does not trust it. Flags win
over the environment; see docs/security.md.

Exit statuses: 0 success; 1 error (for example no gateway reachable); 2 bad
flags or arguments; 3 lock not acquired (held, or the wait timed out); 4 lock
lost (or released, to a renew); 5 refused (the tenant may not use the name, or the lock id is not
yours); 6 a rate limit or quota refused the call; 7 the gateway failed
unexpectedly. "leasectl run" otherwise exits with the command's status, or
128+N when stop signal N came before the command started.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return cmd.Help()
		},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return g.validate(cmd.Flags()) },
	}
	cmd.SetOut(stdout)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// A flag of the command meant ("relase --ttl 5s") is unknown to the
		// root, which got it because the command's name was mistyped: the
		// name is the error to report.
		if !c.HasParent() && len(c.Flags().Args()) > 0 {
			return unknownCommand(c, c.Flags().Arg(0))
		}
		return usageError{err}
	})
	f := cmd.PersistentFlags()
	f.StringArrayVar(&g.endpoints, "endpoint", nil, "gateway URL; repeat for several (default: the environment variable, else "+defaultEndpoint+")")
	bindEnv(f, "endpoint", envEndpoint)
	f.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	f.StringVar(&g.clientID, "client-id", "", "identity reported to Describe as the holder (default <hostname>:<pid>)")
	f.StringVar(&g.protocol, "protocol", "connect", "wire protocol: connect, grpc or grpcweb")
	f.DurationVar(&g.timeout, "timeout", 30*time.Second, "bound on each command's calls to the gateways (an acquire's wait is bounded by --wait)")
	g.creds.register(f)
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("protocol", cobra.FixedCompletions([]string{"connect", "grpc", "grpcweb"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.AddCommand(newAcquireCmd(g), newTryCmd(g), newRenewCmd(g), newReleaseCmd(g),
		newDescribeCmd(g), newWatchCmd(g), newRunCmd(g), newElectCmd(g), newLeaderCmd(g), newObserveCmd(g),
		newLsCmd(g), newQueueCmd(g), newForceReleaseCmd(g), newAuditCmd(g))
	// A refusal of the credentials is explained in leasectl's terms (which
	// flag to pass), whichever command met it.
	for _, sub := range cmd.Commands() {
		if run := sub.RunE; run != nil {
			sub.RunE = func(c *cobra.Command, args []string) error { return g.creds.explain(run(c, args)) }
		}
	}
	setVersion(cmd)
	return cmd
}

// protocols are the values of --protocol.
var protocols = map[string]client.Protocol{"connect": client.ProtocolConnect, "grpc": client.ProtocolGRPC, "grpcweb": client.ProtocolGRPCWeb}

// validate checks the shared flags and fills the endpoints from the
// environment.
func (g *globals) validate(fs *pflag.FlagSet) error {
	if g.output != "table" && g.output != "json" {
		return usagef("--output %q: want table or json", g.output)
	}
	if _, ok := protocols[g.protocol]; !ok {
		return usagef("--protocol %q: want connect, grpc or grpcweb", g.protocol)
	}
	if g.timeout <= 0 {
		return usagef("--timeout %s: want a positive duration", g.timeout)
	}
	if !fs.Changed("endpoint") {
		g.endpoints = strings.FieldsFunc(os.Getenv(envEndpoint), func(r rune) bool {
			return r == ',' || r == ' ' || r == '\t' || r == '\n'
		})
		if len(g.endpoints) == 0 {
			g.endpoints = []string{defaultEndpoint}
		}
	}
	g.creds.fromEnv(fs)
	return nil
}

// client builds an SDK client from the shared flags.
func (g *globals) client() (*client.Client, error) {
	opts, err := g.creds.options(g.endpoints)
	if err != nil {
		return nil, err
	}
	opts = append(opts, client.WithRequestTimeout(g.timeout), client.WithProtocol(protocols[g.protocol]))
	if g.clientID != "" {
		opts = append(opts, client.WithClientID(g.clientID))
	}
	c, err := client.New(g.endpoints, opts...)
	if errors.Is(err, client.ErrInvalidArgument) {
		return nil, usageError{err}
	}
	return c, err
}

// withClient runs do with a client built from the shared flags and closes
// the client after.
func (g *globals) withClient(do func(*client.Client) error) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	return do(c)
}

// call runs one unary call of a command, bounded by --timeout (withClient).
func (g *globals) call(ctx context.Context, do func(context.Context, *client.Client) error) error {
	return g.withClient(func(c *client.Client) error {
		ctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		return do(ctx, c)
	})
}

// show runs one unary call of a command (call) and prints the record it
// returns.
func (g *globals) show(ctx context.Context, do func(context.Context, *client.Client) ([]field, error)) error {
	return g.call(ctx, func(ctx context.Context, c *client.Client) error {
		fields, err := do(ctx, c)
		if err != nil {
			return err
		}
		return g.printer().print(fields...)
	})
}

// args validators that report usage errors.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("want %d argument(s), %s; got %d", len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}
