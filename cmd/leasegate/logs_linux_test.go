package main

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
	"unsafe"
)

// openPTY opens a pseudo-terminal and returns its controlling and
// terminal ends.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		ptmx.Close()
		t.Skipf("unlocking the pseudo-terminal: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		ptmx.Close()
		t.Skipf("numbering the pseudo-terminal: %v", e)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		ptmx.Close()
		t.Skipf("opening the pseudo-terminal: %v", err)
	}
	return ptmx, tty
}

// --log-format auto writes text to a terminal.
func TestLogFormatAutoOnATerminal(t *testing.T) {
	ptmx, tty := openPTY(t)
	defer ptmx.Close()
	if !isTerminal(tty) {
		t.Fatal("isTerminal(a pseudo-terminal) = false")
	}
	logLine(t, "auto", tty)
	tty.Close()
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := ptmx.Read(buf)
		out.Write(buf[:n])
		if err != nil || bytes.Contains(out.Bytes(), []byte("\n")) {
			break
		}
	}
	line, _, _ := bytes.Cut(out.Bytes(), []byte("\n"))
	checkText(t, string(bytes.TrimRight(line, "\r")))
}
