package testbed

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// tcpListen is the state column's value for a listening socket in
// /proc/net/tcp.
const tcpListen = "0A"

// ListenAddrs reads from /proc the TCP addresses process pid listens on,
// as host:port: its socket inodes matched against the kernel's socket
// tables.
func ListenAddrs(pid int) ([]string, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue // no IPv6
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != tcpListen || !inodes[fs[9]] {
				continue
			}
			addr, err := procAddr(fs[1])
			if err != nil {
				return nil, fmt.Errorf("/proc/%d/net/%s: %w", pid, table, err)
			}
			out = append(out, addr)
		}
	}
	slices.Sort(out)
	return out, nil
}

// procAddr decodes /proc/net/tcp's HEXIP:HEXPORT, where the address is
// written in 32-bit words of host (little-endian) byte order.
func procAddr(s string) (string, error) {
	h, p, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(h)
	if !ok || err != nil || (len(raw) != 4 && len(raw) != 16) {
		return "", fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		slices.Reverse(raw[i : i+4])
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return "", fmt.Errorf("address %q", s)
	}
	return net.JoinHostPort(net.IP(raw).String(), strconv.FormatUint(port, 10)), nil
}
