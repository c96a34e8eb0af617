package console

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/sentinel-coordination/sentinel"
)

type electionsData struct {
	Namespace string
	DefaultNS string // Options.Namespace: what an empty Namespace lists; "" every namespace
	AllNS     bool   // the list is of every namespace (see leasesData)
	Group     string
	Groups    []electionRow // without a group: every group (of Namespace, else of every namespace)
	Leader    *sentinel.Leader
	NoLeader  bool
	Members   []sentinel.Member
	Error     string
	Down      bool // Error is the database not answering (unreachable)
	// Choose: the group typed without a namespace exists in several;
	// Groups lists them.
	Choose bool
	More   bool // more groups than groupsShown: Groups are the first
	Shown  int  // groupsShown
}

// groupsShown is how many groups the list shows at most.
const groupsShown = 1000

func electionLink(ns, group string) string {
	return "elections?" + url.Values{"ns": {ns}, "group": {group}}.Encode()
}

type electionRow struct {
	sentinel.Election
	Link string
}

// elections lists the election groups of the namespace asked for, else of
// Options.Namespace, else of every namespace (as the start page), each with its leader and live members; with a group, it
// shows that group's leader (read from its lease row: term, since, expiry)
// and its members. A group typed without a namespace is that of
// Options.Namespace, else looked for in every namespace: found in one, it
// is shown; in several, they are listed to choose from.
func (cs *Console) elections(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := electionsData{Namespace: q.Get("ns"), Group: q.Get("group"), DefaultNS: cs.opts.Namespace}
	status := http.StatusOK
	if d.Group != "" && d.Namespace == "" {
		d.Namespace = cs.opts.Namespace
	}
	if d.Group != "" && d.Namespace == "" {
		ctx, cancel := ctxTimeout(r)
		defer cancel()
		es, err := cs.c.Elections(ctx, sentinel.ElectionFilter{AllNamespaces: true, Limit: 100000})
		if err != nil {
			d.Error, d.Down, status = err.Error(), unreachable(err), errStatus(err)
		}
		for _, e := range es {
			if e.Group == d.Group {
				d.Groups = append(d.Groups, electionRow{Election: e, Link: electionLink(e.Namespace, e.Group)})
			}
		}
		switch {
		case len(d.Groups) == 1:
			d.Namespace, d.Groups = d.Groups[0].Namespace, nil
		case len(d.Groups) > 1:
			d.Choose = true
			cs.render(w, r, status, "elections.html", page{Nav: "elections", Data: d})
			return
		}
	}
	if d.Group == "" {
		ctx, cancel := ctxTimeout(r)
		defer cancel()
		var ns string
		ns, d.AllNS = pageNamespace(d.Namespace, cs.opts.Namespace, q.Get("all") == "1")
		// One more than shown: whether there are more is said, not guessed.
		es, err := cs.c.Elections(ctx, sentinel.ElectionFilter{Namespace: ns, AllNamespaces: d.AllNS, Limit: groupsShown + 1})
		if err != nil {
			d.Error, d.Down, status = err.Error(), unreachable(err), errStatus(err)
		}
		if len(es) > groupsShown {
			es, d.More, d.Shown = es[:groupsShown], true, groupsShown
		}
		for _, e := range es {
			d.Groups = append(d.Groups, electionRow{Election: e, Link: electionLink(e.Namespace, e.Group)})
		}
	}
	if d.Group != "" {
		var opts []sentinel.Option
		if d.Namespace != "" {
			opts = append(opts, sentinel.WithNamespace(d.Namespace))
		}
		ctx, cancel := ctxTimeout(r)
		defer cancel()
		l, err := cs.c.Leader(ctx, d.Group, opts...)
		switch {
		case errors.Is(err, sentinel.ErrNoLeader):
			d.NoLeader = true
		case err != nil:
			d.Error, d.Down, status = err.Error(), unreachable(err), errStatus(err)
		default:
			d.Leader = l
		}
		if err == nil || d.NoLeader {
			ms, err := cs.c.Members(ctx, d.Group, opts...)
			if err != nil {
				d.Error, d.Down, status = err.Error(), unreachable(err), errStatus(err)
			}
			d.Members = ms
		}
	}
	cs.render(w, r, status, "elections.html", page{Nav: "elections", Data: d})
}
