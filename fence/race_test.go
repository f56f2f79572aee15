package fence_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/leasegate/leasegate/fence"
	"github.com/leasegate/leasegate/fence/storetest"
)

// memoryRaceStore fences a map with a Memory guard.
func memoryRaceStore() storetest.RaceStore {
	m := fence.NewMemory()
	var mu sync.Mutex
	logs := map[string][]int64{}
	data := map[string]int64{}
	return storetest.RaceStore{
		Write: func(ctx context.Context, res string, tok int64) error {
			return m.Write(ctx, res, tok, func() error {
				mu.Lock()
				defer mu.Unlock()
				logs[res] = append(logs[res], tok)
				data[res] = tok
				return nil
			})
		},
		Accepted: func(_ context.Context, res string) ([]int64, error) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(logs[res]), nil
		},
		Data: func(_ context.Context, res string) (int64, bool, error) {
			mu.Lock()
			defer mu.Unlock()
			tok, ok := data[res]
			return tok, ok, nil
		},
	}
}

func TestMemoryRace(t *testing.T) {
	storetest.Race(t, memoryRaceStore(), "mem", storetest.RaceSizes{Writers: 8, Rounds: 2000, PerWriter: 1000})
}
