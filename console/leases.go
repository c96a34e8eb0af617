package console

import (
	"net/http"

	"github.com/sentinel-coordination/sentinel"
)

type leasesData struct {
	Namespace string
	DefaultNS string // Options.Namespace: what an empty Namespace lists; "" every namespace
	AllNS     bool   // every namespace: without Namespace, when DefaultNS is "" or asked (?all=1)
	Prefix    string
	Leases    []sentinel.Holder
	More      bool // more live leases than leasesShown match: Leases are the first
	Shown     int  // leasesShown
	Error     string
	Down      bool // Error is the database not answering (unreachable)
}

// leasesShown is how many leases the page lists at most.
const leasesShown = 500

// leases lists the live leases (holder, host, token, expiry), read by the
// database clock, of the namespace asked for; without one, of
// Options.Namespace, else of every namespace (as the start page).
func (cs *Console) leases(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := leasesData{Namespace: q.Get("ns"), Prefix: q.Get("prefix"), DefaultNS: cs.opts.Namespace, Shown: leasesShown}
	var ns string
	ns, d.AllNS = pageNamespace(d.Namespace, cs.opts.Namespace, q.Get("all") == "1")
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	status := http.StatusOK
	// One more than shown: whether there are more is said, not guessed.
	f := sentinel.LeaseFilter{Namespace: ns, AllNamespaces: d.AllNS, Prefix: d.Prefix, Limit: leasesShown + 1}
	ls, err := cs.c.Leases(ctx, f)
	if err != nil {
		d.Error, d.Down, status = err.Error(), unreachable(err), errStatus(err)
	}
	if len(ls) > leasesShown {
		ls, d.More = ls[:leasesShown], true
	}
	d.Leases = ls
	cs.render(w, r, status, "leases.html", page{Nav: "leases", Data: d})
}

type queuesData struct {
	Namespace string
	DefaultNS string // Options.Namespace: what an empty Namespace lists; "" every namespace
	AllNS     bool   // every namespace (see leasesData)
	Queues    []sentinel.QueueStatus
	Error     string
	Down      bool // Error is the database not answering (unreachable)
}

// queues lists every resource with a live ticket: its holder (the lowest
// live ticket) and its waiters in the order they will be served; of the
// namespace asked for, else of Options.Namespace, else of every namespace
// (as the start page).
func (cs *Console) queues(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := queuesData{Namespace: q.Get("ns"), DefaultNS: cs.opts.Namespace}
	var ns string
	ns, d.AllNS = pageNamespace(d.Namespace, cs.opts.Namespace, q.Get("all") == "1")
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	status := http.StatusOK
	var qs []sentinel.QueueStatus
	var err error
	if d.AllNS {
		qs, err = cs.c.AllQueues(ctx)
	} else {
		qs, err = cs.c.Queues(ctx, sentinel.WithNamespace(ns))
	}
	if err != nil {
		d.Error, d.Down, status = err.Error(), unreachable(err), errStatus(err)
	}
	d.Queues = qs
	cs.render(w, r, status, "queues.html", page{Nav: "queues", Data: d})
}

// pageNamespace is the namespace a view lists: the one typed, else, unless
// every namespace is asked for (all), def (Options.Namespace); every
// namespace (ns "") when none is left.
func pageNamespace(typed, def string, all bool) (ns string, every bool) {
	switch {
	case typed != "":
		return typed, false
	case all || def == "":
		return "", true
	}
	return def, false
}
