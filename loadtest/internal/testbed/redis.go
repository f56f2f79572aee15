package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegate/leasegate/internal/embedetcd"
)

// Redis is a redis-server the load test started on loopback, with AOF
// persistence and the given appendfsync policy, in a temporary directory.
type Redis struct {
	// Fsync is the appendfsync policy: "always" or "everysec".
	Fsync string
	// Addr is its host:port.
	Addr string

	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// RedisServerPath finds redis-server on PATH, or returns "".
func RedisServerPath() string {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return ""
	}
	return p
}

// RedisVersion is the installed redis-server's version, or "".
func RedisVersion() string {
	p := RedisServerPath()
	if p == "" {
		return ""
	}
	out, err := exec.Command(p, "--version").Output()
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(string(out))
}

// StartRedis starts redis-server on a free loopback port with AOF on and
// appendfsync set to fsync, and waits until it answers PING (10 s at most).
// It never saves RDB snapshots. Close kills it and removes its directory.
func StartRedis(ctx context.Context, fsync string) (*Redis, error) {
	bin := RedisServerPath()
	if bin == "" {
		return nil, errors.New("redis-server is not installed (Debian: apt-get install -y redis-server)")
	}
	addr, err := embedetcd.FreeAddr()
	if err != nil {
		return nil, err
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	dir, err := os.MkdirTemp("", "loadtest-redis-"+fsync+"-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1", "--port", port, "--protected-mode", "yes",
		"--dir", dir, "--save", "", "--appendonly", "yes", "--appendfsync", fsync,
		"--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(dir, "redis.log"),
	)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	r := &Redis{Fsync: fsync, Addr: addr, cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	if err := r.awaitReady(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Redis) awaitReady(ctx context.Context) error {
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if err := rdb.Ping(ctx).Err(); err == nil {
			return nil
		}
		select {
		case <-r.done:
			return fmt.Errorf("redis-server (appendfsync %s) exited at start; see its log in %s", r.Fsync, r.dir)
		case <-ctx.Done():
			return fmt.Errorf("redis-server (appendfsync %s) did not answer PING in 10s", r.Fsync)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CPU is the server process's CPU time so far (user + system).
func (r *Redis) CPU() time.Duration { return processCPU(r.cmd.Process.Pid) }

// Close kills the server (it holds nothing worth keeping), waits for it
// and removes its directory.
func (r *Redis) Close() {
	_ = r.cmd.Process.Kill()
	<-r.done
	os.RemoveAll(r.dir)
}
