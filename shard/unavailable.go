package shard

import "errors"

// Unavailable wraps err, a failure of one cluster, so that it reads as
// ErrShardUnavailable: "shard unavailable: …", said once even when err
// says it already (a breaker's or a Reach's refusal). errors.Is sees both
// ErrShardUnavailable and err.
func Unavailable(err error) error { return &unavailableError{err: err} }

type unavailableError struct{ err error }

func (e *unavailableError) Error() string {
	if errors.Is(e.err, ErrShardUnavailable) {
		return e.err.Error()
	}
	return ErrShardUnavailable.Error() + ": " + e.err.Error()
}

func (e *unavailableError) Unwrap() []error { return []error{ErrShardUnavailable, e.err} }
