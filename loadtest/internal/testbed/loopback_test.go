package testbed

import (
	"errors"
	"testing"
)

func TestCheckURL(t *testing.T) {
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:7070", true},
		{"http://127.8.9.10:1", true},
		{"http://[::1]:7070", true},
		{"http://localhost:7070", true},
		{"http://10.0.0.5:7070", false},
		{"http://192.168.1.2:7070", false},
		{"http://8.8.8.8", false},
		{"ftp://127.0.0.1", false},
		{"127.0.0.1:7070", false},
	} {
		err := CheckURL(c.url)
		if (err == nil) != c.ok {
			t.Errorf("CheckURL(%q) = %v; want ok = %v", c.url, err, c.ok)
		}
		if err != nil && c.ok == false && c.url != "ftp://127.0.0.1" && c.url != "127.0.0.1:7070" && !errors.Is(err, ErrNotLoopback) {
			t.Errorf("CheckURL(%q) = %v; want ErrNotLoopback", c.url, err)
		}
	}
}
