package rig

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// auditPolicy logs the metadata of the replicas' requests (not the controllers': they would
// cost the API server more than krteds does) once answered; a watch is logged when it opens
// (ResponseStarted) and when it ends.
func auditPolicy(replicas int) string {
	var users []string
	for i := 0; i < replicas; i++ {
		users = append(users, fmt.Sprintf("krteds-%d", i))
	}
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [` + strings.Join(users, ", ") + `]
- level: None
`
}

// auditEvent is what the rig reads of an audit log line.
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	RequestURI string `json:"requestURI"`
	ObjectRef  struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
	Stamp time.Time `json:"stageTimestamp"`
}

// APILoad is one user's requests between two times: completed requests by verb, and the
// watches it opened and those still open at the end.
type APILoad struct {
	ByVerb map[string]int
	// WatchesOpened counts the watches opened in the window; Watching is, per resource, the
	// watches open at its end.
	WatchesOpened int
	Watching      map[string]int
	ListsByKind   map[string]int
	// WatchLists counts the watches opened with sendInitialEvents: a list streamed over a watch
	// (client-go's watch-list), which the API server serves from its watch cache and which the
	// audit log shows as a watch, not a list.
	WatchLists int
}

// APILoadOf reads the audit log for the users' requests between from and to.
func (r *Rig) APILoadOf(users []string, from, to time.Time) map[string]*APILoad {
	out := map[string]*APILoad{}
	for _, u := range users {
		out[u] = &APILoad{ByVerb: map[string]int{}, ListsByKind: map[string]int{}, Watching: map[string]int{}}
	}
	f, err := os.Open(r.audit)
	if err != nil {
		r.T.Logf("audit log: %v", err)
		return out
	}
	defer f.Close()
	type watchOf struct{ user, resource string }
	open := map[watchOf]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	restarts := r.restarts
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		for len(restarts) > 0 && e.Stamp.After(restarts[0]) {
			clear(open) // the API server that held them is gone
			restarts = restarts[1:]
		}
		l := out[e.User.Username]
		if l == nil || e.Stamp.After(to) {
			continue
		}
		if e.Verb == "watch" {
			switch e.Stage {
			case "ResponseStarted":
				open[watchOf{e.User.Username, e.ObjectRef.Resource}]++
				if !e.Stamp.Before(from) {
					l.WatchesOpened++
					if strings.Contains(e.RequestURI, "sendInitialEvents=true") {
						l.WatchLists++
					}
				}
			case "ResponseComplete", "Panic":
				open[watchOf{e.User.Username, e.ObjectRef.Resource}]--
			}
			continue
		}
		if e.Stage != "ResponseComplete" || e.Stamp.Before(from) {
			continue
		}
		l.ByVerb[e.Verb]++
		if e.Verb == "list" {
			l.ListsByKind[e.ObjectRef.Resource]++
		}
	}
	for w, n := range open {
		if n > 0 {
			out[w.user].Watching[w.resource] = n
		}
	}
	return out
}
