package testbed

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// renewedMetric counts lease renewals on etcd's leader: every keepalive
// that reaches etcd, whoever sent it.
const renewedMetric = "etcd_debugging_lease_renewed_total"

// ErrNoCounts is returned when etcd's counters cannot be read: an external
// gateway without --etcd.
var ErrNoCounts = errors.New("etcd's counters are not reachable")

// Keepalives returns how many lease renewals etcd has seen so far: with the
// embedded setup, summed over its three clusters (they share this process's
// Prometheus registry); with external gateways, on the --etcd cluster only,
// and with the pinned setup on its etcd process (scraped from its
// /metrics).
func (b *Bed) Keepalives(ctx context.Context) (float64, error) {
	if b.Embedded() {
		return gatherCounter(prometheus.DefaultGatherer, renewedMetric)
	}
	if len(b.HomeEtcd) == 0 {
		return 0, ErrNoCounts
	}
	var total float64
	for _, ep := range b.HomeEtcd {
		v, err := scrapeCounter(ctx, strings.TrimSuffix(ep, "/")+"/metrics", renewedMetric)
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}

// KeepaliveScope says what Keepalives counts, for the report.
func (b *Bed) KeepaliveScope() string {
	if b.Embedded() {
		return "all three embedded clusters"
	}
	return fmt.Sprintf("cluster %s only", b.HomeShard)
}

func gatherCounter(g prometheus.Gatherer, name string) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return sumCounter(mf), nil
		}
	}
	return 0, fmt.Errorf("metric %s is not registered: %w", name, ErrNoCounts)
}

func scrapeCounter(ctx context.Context, url, name string) (float64, error) {
	if err := CheckURL(url); err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	mf, ok := mfs[name]
	if !ok {
		return 0, fmt.Errorf("scrape %s: no %s: %w", url, name, ErrNoCounts)
	}
	return sumCounter(mf), nil
}

func sumCounter(mf *dto.MetricFamily) float64 {
	var v float64
	for _, m := range mf.GetMetric() {
		v += m.GetCounter().GetValue() + m.GetUntyped().GetValue()
	}
	return v
}

// EtcdDBSize sums the backend database size over every known cluster, and
// the keys in them (a count-only range over everything).
func (b *Bed) EtcdDBSize(ctx context.Context) (bytes, inUse int64, err error) {
	for _, eps := range b.Clusters {
		cli, err := dialQuiet(eps)
		if err != nil {
			return 0, 0, err
		}
		for _, ep := range eps[:1] {
			st, err := cli.Status(ctx, strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://"))
			if err != nil {
				cli.Close()
				return 0, 0, err
			}
			bytes += st.DbSize
			inUse += st.DbSizeInUse
		}
		cli.Close()
	}
	return bytes, inUse, nil
}

func dialQuiet(eps []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: dialTimeout, Logger: nopLogger})
}

// RaftIndex sums the raft log's applied index over every known cluster:
// its growth is the raft entries (writes: transactions, puts, deletes,
// lease grants and revokes) the clusters agreed on. Lease keepalives are
// not raft entries.
func (b *Bed) RaftIndex(ctx context.Context) (int64, error) {
	b.statusMu.Lock()
	defer b.statusMu.Unlock()
	if len(b.Clusters) == 0 {
		return 0, ErrNoCounts
	}
	if b.status == nil {
		b.status = map[string]*clientv3.Client{}
	}
	var sum int64
	for name, eps := range b.Clusters {
		cli := b.status[name]
		if cli == nil {
			var err error
			if cli, err = dialQuiet(eps); err != nil {
				return 0, err
			}
			b.status[name] = cli
		}
		for _, ep := range eps {
			st, err := cli.Status(ctx, strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://"))
			if err != nil {
				return 0, err
			}
			if st.Leader == st.Header.MemberId {
				sum += int64(st.RaftAppliedIndex)
			}
		}
	}
	return sum, nil
}
