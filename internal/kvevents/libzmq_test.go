package kvevents_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// TestSimulatorFramesInLibzmq checks the simulator's publisher (go-zeromq's PUB and ROUTER) against
// a libzmq peer: an independent Python subscriber (pyzmq SUB and DEALER, msgpack) receives its
// batches live, replays them from seq 0, and the decoded batches have vLLM's layout (map form) or
// SGLang's (array_like form).
func TestSimulatorFramesInLibzmq(t *testing.T) {
	py := python(t)
	for _, proto := range []sim.Protocol{sim.ProtocolVLLM, sim.ProtocolSGLang} {
		t.Run(string(proto), func(t *testing.T) {
			e := startSim(t, proto)
			ep := e.KVEventsEndpoints()[0]
			const want = 3
			cmd := exec.Command(py, "testdata/vllm_subscriber.py", ep.Publisher, ep.Replay, "3")
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(stdout)
				sc.Buffer(nil, 1<<20)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			if l := <-lines; l != "SUBSCRIBED" {
				t.Fatalf("subscriber said %q", l)
			}
			// libzmq subscribes asynchronously: publish one-block prompts until it has seen want events.
			var out string
			sent := map[float64]bool{}
			deadline := time.After(20 * time.Second)
			for i := 0; out == ""; i++ {
				id := uint32(9000 + i)
				complete(t, e, []uint32{id, id, id, id})
				sent[float64(id)] = true
				select {
				case out = <-lines:
				case <-time.After(20 * time.Millisecond):
				case <-deadline:
					t.Fatal("the Python subscriber never received enough events")
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("subscriber: %v", err)
			}
			var got struct{ Live, Replayed [][2]any }
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("subscriber output %q: %v", out, err)
			}
			if len(got.Replayed) < want || len(got.Live) == 0 {
				t.Fatalf("live %d, replayed %d batches", len(got.Live), len(got.Replayed))
			}
			bySeq := map[float64]any{}
			for i, r := range got.Replayed {
				if r[0] != float64(i) {
					t.Fatalf("replayed seq %v at position %d: not contiguous from 0", r[0], i)
				}
				bySeq[r[0].(float64)] = r[1]
				checkBatchLayout(t, proto, r[1], sent)
			}
			for _, l := range got.Live {
				if !reflect.DeepEqual(bySeq[l[0].(float64)], l[1]) {
					t.Errorf("live batch %v differs from its replay:\n%v\n%v", l[0], l[1], bySeq[l[0].(float64)])
				}
			}
		})
	}
}

// checkBatchLayout checks a decoded batch against vLLM's KVEventBatch field layout (map form) or
// SGLang's (array_like form), each holding one-block BlockStored events of prompts the test sent.
func checkBatchLayout(t *testing.T, proto sim.Protocol, batch any, sent map[float64]bool) {
	t.Helper()
	var events []any
	if proto == sim.ProtocolVLLM {
		m, ok := batch.(map[string]any)
		if !ok || len(m) != 3 || m["data_parallel_rank"] != float64(0) {
			t.Fatalf("vLLM batch %v: want {ts, events, data_parallel_rank: 0}", batch)
		}
		if _, ok := m["ts"].(float64); !ok {
			t.Fatalf("ts %v", m["ts"])
		}
		events, _ = m["events"].([]any)
	} else {
		a, ok := batch.([]any)
		if !ok || len(a) != 3 || a[2] != float64(0) {
			t.Fatalf("SGLang batch %v: want [ts, events, attn_dp_rank 0]", batch)
		}
		events, _ = a[1].([]any)
	}
	if len(events) == 0 {
		t.Fatalf("batch without events: %v", batch)
	}
	for _, ev := range events {
		var tokens []any
		if proto == sim.ProtocolVLLM {
			m, _ := ev.(map[string]any)
			if m["type"] != "BlockStored" || m["block_size"] != float64(4) || m["medium"] != "GPU" ||
				m["parent_block_hash"] != nil || len(m["block_hashes"].([]any)) != 1 {
				t.Fatalf("vLLM event %v", ev)
			}
			tokens, _ = m["token_ids"].([]any)
		} else {
			a, _ := ev.([]any)
			if len(a) != 8 || a[0] != "BlockStored" || a[2] != nil || a[4] != float64(4) || a[6] != "GPU" ||
				len(a[1].([]any)) != 1 {
				t.Fatalf("SGLang event %v: want [BlockStored, [hash], null, ids, 4, null, GPU, null]", ev)
			}
			tokens, _ = a[3].([]any)
		}
		if len(tokens) != 4 || !sent[tokens[0].(float64)] {
			t.Errorf("event tokens %v are not a prompt the test sent", tokens)
		}
	}
}
