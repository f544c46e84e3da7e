package xds

// fairQueue holds waiting tickets by caller, and serves the callers in turn: the first ticket
// of the caller whose turn it is, then that caller goes to the back.
type fairQueue struct {
	byCaller map[string][]*ticket
	turn     []string
}

func (q *fairQueue) empty() bool { return len(q.turn) == 0 }

func (q *fairQueue) push(t *ticket) {
	if q.byCaller == nil {
		q.byCaller = map[string][]*ticket{}
	}
	if len(q.byCaller[t.caller]) == 0 {
		q.turn = append(q.turn, t.caller)
	}
	q.byCaller[t.caller] = append(q.byCaller[t.caller], t)
}

// peek is the ticket whose turn it is (nil: none waits).
func (q *fairQueue) peek() *ticket {
	if len(q.turn) == 0 {
		return nil
	}
	return q.byCaller[q.turn[0]][0]
}

// pop takes the ticket whose turn it is; its caller goes to the back if it has more.
func (q *fairQueue) pop() {
	c := q.turn[0]
	q.turn = q.turn[1:]
	ts := q.byCaller[c][1:]
	if len(ts) == 0 {
		delete(q.byCaller, c)
		return
	}
	q.byCaller[c] = ts
	q.turn = append(q.turn, c)
}

// remove takes a waiting ticket out, reporting whether it was there.
func (q *fairQueue) remove(t *ticket) bool {
	ts := q.byCaller[t.caller]
	for i, w := range ts {
		if w != t {
			continue
		}
		ts = append(ts[:i], ts[i+1:]...)
		if len(ts) > 0 {
			q.byCaller[t.caller] = ts
			return true
		}
		delete(q.byCaller, t.caller)
		for j, c := range q.turn {
			if c == t.caller {
				q.turn = append(q.turn[:j], q.turn[j+1:]...)
				break
			}
		}
		return true
	}
	return false
}
