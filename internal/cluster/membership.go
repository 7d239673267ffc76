package cluster

import (
	"slices"
	"sync"
	"time"
)

// peerTable is what this replica knows of the other members: who the membership source lists, when each
// was last heard from (a report or ping either way), whether nothing listened at its address on the last
// try, and whether it is leaving. The coordinator's books read it to tell silent members from dead ones;
// static election reads it to find the lowest live member.
type peerTable struct {
	self string
	now  func() time.Time

	mu    sync.Mutex
	peers map[string]*peer
}

type peer struct {
	present     bool      // listed by the membership source
	lastContact time.Time // zero: not heard from since it last refused
	refused     bool      // the last attempt to reach it found nothing listening
	leaving     bool
	incarnation string
}

// peerView is a copy of one peer's entry.
type peerView struct {
	present, refused, leaving bool
	lastContact               time.Time
	incarnation               string
}

func newPeerTable(self string, now func() time.Time) *peerTable {
	return &peerTable{self: self, now: now, peers: map[string]*peer{self: {present: true}}}
}

func (t *peerTable) get(id string) *peer {
	p := t.peers[id]
	if p == nil {
		p = &peer{}
		t.peers[id] = p
	}
	return p
}

// setMembers replaces the list of members the source knows; self stays present.
func (t *peerTable) setMembers(ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, p := range t.peers {
		p.present = id == t.self
	}
	for _, id := range ids {
		t.get(id).present = true
	}
}

// contact records that id was heard from (it called us, or answered us).
func (t *peerTable) contact(id, incarnation string, leaving bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.get(id)
	p.lastContact, p.refused, p.leaving = t.now(), false, leaving
	if incarnation != "" {
		p.incarnation = incarnation
	}
}

// refuse records that nothing listened at id's address: it is not live until heard from again.
func (t *peerTable) refuse(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.get(id)
	p.refused = true
	p.lastContact = time.Time{}
}

func (t *peerTable) isMember(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[id]
	return p != nil && p.present
}

// members returns the ids the source lists, sorted.
func (t *peerTable) members() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for id, p := range t.peers {
		if p.present {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (t *peerTable) view(id string) peerView {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[id]
	if p == nil {
		return peerView{}
	}
	return peerView{present: p.present, refused: p.refused, leaving: p.leaving, lastContact: p.lastContact, incarnation: p.incarnation}
}

// lowestLive is static election: the smallest id among the members heard from within window and not
// leaving, this replica included unless it is leaving itself.
func (t *peerTable) lowestLive(window time.Duration, selfLeaving bool) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	best := ""
	for id, p := range t.peers {
		if !p.present {
			continue
		}
		if id == t.self {
			if selfLeaving {
				continue
			}
		} else if p.leaving || p.lastContact.IsZero() || now.Sub(p.lastContact) >= window {
			continue
		}
		if best == "" || id < best {
			best = id
		}
	}
	return best
}
