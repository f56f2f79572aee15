package testbed

import (
	"slices"
	"testing"
)

func TestParseCPUs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want CPUs
		str  string
	}{
		{"0", CPUs{0}, "0"},
		{"1,0", CPUs{0, 1}, "0-1"},
		{"0-2,5", CPUs{0, 1, 2, 5}, "0-2,5"},
		{" 3 , 1-1,3", CPUs{1, 3}, "1,3"},
	} {
		got, err := ParseCPUs(c.in)
		if err != nil || !slices.Equal(got, c.want) || got.String() != c.str {
			t.Errorf("ParseCPUs(%q) = %v (%q), %v; want %v (%q)", c.in, got, got.String(), err, c.want, c.str)
		}
	}
	for _, in := range []string{"", "a", "-1", "2-1", "0,", "1-x", "5000"} {
		if got, err := ParseCPUs(in); err == nil {
			t.Errorf("ParseCPUs(%q) = %v; want an error", in, got)
		}
	}
}

func TestCPUsWithout(t *testing.T) {
	if got := (CPUs{0, 1, 2, 3}).Without(CPUs{1, 3, 7}); !slices.Equal(got, CPUs{0, 2}) {
		t.Errorf("0-3 without 1,3,7 = %v; want [0 2]", got)
	}
}
