//go:build !linux

package testbed

// AllowedCPUs is not available off Linux.
func AllowedCPUs() (CPUs, error) { return nil, ErrNoAffinity }

// PinSelf is not available off Linux.
func PinSelf(CPUs) (func(), error) { return nil, ErrNoAffinity }

// ThreadCPUs is not available off Linux.
func ThreadCPUs(int) ([]string, error) { return nil, ErrNoAffinity }

// ListenAddrs is not available off Linux.
func ListenAddrs(int) ([]string, error) { return nil, ErrNoAffinity }
