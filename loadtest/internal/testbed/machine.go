package testbed

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	"go.uber.org/zap"
)

const dialTimeout = 5 * time.Second

var nopLogger = zap.NewNop()

// Machine describes where a run happened.
type Machine struct {
	CPUs         int    `json:"cpus"`
	CPUModel     string `json:"cpu_model"`
	MemoryGiB    int64  `json:"memory_gib"`
	Kernel       string `json:"kernel"`
	GoVersion    string `json:"go_version"`
	EtcdVersion  string `json:"etcd_version"`
	RedisVersion string `json:"redis_version,omitempty"`
}

// ReadMachine reads the machine's description from /proc and the binaries.
func ReadMachine() Machine {
	m := Machine{
		CPUs:         runtime.NumCPU(),
		CPUModel:     procField("/proc/cpuinfo", "model name"),
		GoVersion:    runtime.Version(),
		EtcdVersion:  version.Version,
		RedisVersion: RedisVersion(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if kb := procField("/proc/meminfo", "MemTotal"); kb != "" {
		var n int64
		for _, c := range strings.Fields(kb)[0] {
			n = n*10 + int64(c-'0')
		}
		m.MemoryGiB = (n + 1<<19) >> 20
	}
	return m
}

func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
