package queue

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// txnParts is one transaction built from parts. A part adds its compares
// and operations, keeps the slot each operation was given and reads its
// own answer by that slot once the transaction is committed, wherever the
// other parts put theirs. The compares and operations reach etcd in the
// order the parts added them.
type txnParts struct {
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
}

// slot is where an operation's answer is among a transaction's responses.
type slot int

// of is the answer in slot s of rs, a transaction's (or a nested
// transaction's) responses.
func (s slot) of(rs []*pb.ResponseOp) *pb.ResponseOp { return rs[s] }

func (t *txnParts) compare(cs ...clientv3.Cmp) { t.cmps = append(t.cmps, cs...) }

// both adds then to the Then branch and els to the Else branch, at the
// same slot. Only a transaction whose every operation goes in by both or
// read keeps its branches aligned so.
func (t *txnParts) both(then, els clientv3.Op) slot {
	t.then, t.els = append(t.then, then), append(t.els, els)
	return slot(len(t.then) - 1)
}

// read adds op to both branches (both): its answer is there whether the
// compares held or not.
func (t *txnParts) read(op clientv3.Op) slot { return t.both(op, op) }

// onThen adds op to the Then branch alone.
func (t *txnParts) onThen(op clientv3.Op) slot {
	t.then = append(t.then, op)
	return slot(len(t.then) - 1)
}

// onElse adds op to the Else branch alone.
func (t *txnParts) onElse(op clientv3.Op) slot {
	t.els = append(t.els, op)
	return slot(len(t.els) - 1)
}

// commit sends the transaction.
func (t *txnParts) commit(ctx context.Context, kv clientv3.KV) (*clientv3.TxnResponse, error) {
	return kv.Txn(ctx).If(t.cmps...).Then(t.then...).Else(t.els...).Commit()
}
