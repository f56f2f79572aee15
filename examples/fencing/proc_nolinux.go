//go:build !linux

package main

import "syscall"

// childSysProcAttr: without Linux's parent-death signal, client A is ended
// by the demo's own cleanup only.
func childSysProcAttr() *syscall.SysProcAttr { return nil }
