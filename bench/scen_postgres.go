package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/varplane/varplane/internal/procstat"
)

// pgSubs is the number of SSE subscribers of the PostgreSQL replica group.
const pgSubs = 100

// scenarioPostgres measures the PostgreSQL store of record: durable commits
// at 1 and 64 writers beside the file store and etcd in the same run, and a
// commit on replica A → delivery to subscribers of replica B (LISTEN/NOTIFY
// and B's read of the head). It creates a database of its own on the
// server at -postgres (with synchronous_commit on), and drops it at the end.
func scenarioPostgres(ctx context.Context, cfg *config, e *env, rep *Report) {
	var groups []*Group
	for _, writers := range []int{1, 64} {
		g := newGroup(fmt.Sprintf("postgres.commit.%d", writers), "postgres",
			fmt.Sprintf("durable commit on the PostgreSQL store, %d concurrent writer(s) on distinct scopes, 1 KiB documents", writers),
			"commits/s", "etcd-cas", "varplane-file")
		groups = append(groups, g)
	}
	gRep := newGroup("postgres.replica", "postgres",
		fmt.Sprintf("commit on replica A → delivery on replica B (%d SSE subscribers on B, %d commits spaced %v)", pgSubs, cfg.pushCommits, cfg.pushSpacing),
		"deliveries/s", "A→A")
	rep.Groups = append(rep.Groups, append(groups, gRep)...)
	skipAll := func(why string) {
		for _, g := range groups {
			g.skip("varplane-postgres", why)
			g.skip("varplane-postgres-publish", why)
			g.skip("varplane-postgres-publish-1", why)
		}
		gRep.skip("A→B", why)
	}

	dbName := fmt.Sprintf("varplane_bench_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	admin, storeURL, syncCommit, err := createBenchDB(ctx, cfg.postgresURL, dbName)
	if err != nil {
		skipAll(fmt.Sprintf("PostgreSQL at -postgres unusable: %v", err))
		return
	}
	defer func() {
		dropBenchDB(admin, dbName)
		rep.Notes = append(rep.Notes, fmt.Sprintf("postgres: used the database %s (synchronous_commit %s) and dropped it afterwards", dbName, syncCommit))
	}()
	note := fmt.Sprintf("varplane serve --store postgres://…/%s (the machine's PostgreSQL on loopback, synchronous_commit %s: a commit is acknowledged after its WAL is flushed); two servers (replicas A and B) share it", dbName, syncCommit)
	for _, g := range groups {
		g.Notes = append(g.Notes, note,
			"varplane-postgres: one commit = POST admin/revisions + POST admin/activate with expectedGeneration (two store commits: varplane_create and varplane_activate); one keep-alive connection per writer; pool_max_conns 32 (default)",
			"varplane-postgres-publish: one commit = POST admin/publish with expectedGeneration, a new document stored and activated in one request (one varplane_publish call; concurrent calls share a transaction and its WAL flush); replica B follows every commit (its notification, its read of the commit from the log), as a deployment's second replica would",
			"varplane-postgres-publish-1: the same publishes to a server alone on a database of its own (on the same PostgreSQL cluster): no second replica following, as etcd-cas and varplane-file have none",
			"varplane-file: the file store (fsync before the answer) and etcd-cas (Txn on ModRevision, fdatasync) in the same run",
			"pg_cores: CPU of the whole PostgreSQL cluster (the postmaster and all its children, other databases' sessions included) during the side's run; pg_cpu_us_per_op: that CPU per commit; pg_db_cpu_us_per_op: the CPU per commit of the backends connected to this run's database alone; pg_xacts_per_op: transactions that database committed per commit, approximate (the commits, their notifications, the other replica's reads; below 1 when commits share a transaction); server_cpu_us_per_op is the varplane server's alone")
	}

	if _, err := e.varplaneBin(); err != nil {
		skipAll(err.Error())
		return
	}
	a, err := e.startVarplane(ctx, "postgres-a", storeURL)
	if err != nil {
		skipAll(err.Error())
		return
	}
	defer a.stop()
	b, err := e.startVarplane(ctx, "postgres-b", storeURL)
	if err != nil {
		skipAll(err.Error())
		return
	}
	defer b.stop()

	// a server alone on a second database: the publishes without a follower
	soloName := dbName + "_solo"
	soloAdmin, soloURL, _, soloErr := createBenchDB(ctx, cfg.postgresURL, soloName)
	var solo *vpServer
	if soloErr == nil {
		defer dropBenchDB(soloAdmin, soloName)
		if solo, soloErr = e.startVarplane(ctx, "postgres-solo", soloURL); soloErr == nil {
			defer solo.stop()
		}
	}

	fs, fsErr := e.startVarplane(ctx, "postgres-file-peer", "file:"+filepath.Join(cfg.tmp, "postgres-peer.jsonl"))
	if fsErr == nil {
		defer fs.stop()
	}
	et, etErr := startEtcd(ctx, cfg, "postgres-peer")
	var ecli []*clientv3.Client
	if etErr == nil {
		defer et.stop()
		ecli, etErr = et.clients(64)
		if etErr == nil {
			defer closeClients(ecli)
		}
	}
	for i, writers := range []int{1, 64} {
		g := groups[i]
		sides := []side{
			withPGCPU(admin, dbName, vpCommitSide(cfg, "varplane-postgres", a, writers, fmt.Sprintf("bench.pg%d", writers))),
			withPGCPU(admin, dbName, vpPublishSide(cfg, "varplane-postgres-publish", a, writers, fmt.Sprintf("bench.pgp%d", writers))),
		}
		if soloErr != nil {
			g.skip("varplane-postgres-publish-1", soloErr.Error())
		} else {
			sides = append(sides, withPGCPU(soloAdmin, soloName, vpPublishSide(cfg, "varplane-postgres-publish-1", solo, writers, fmt.Sprintf("bench.pgs%d", writers))))
		}
		if fsErr != nil {
			g.skip("varplane-file", fsErr.Error())
		} else {
			sides = append(sides, vpCommitSide(cfg, "varplane-file", fs, writers, fmt.Sprintf("bench.pgf%d", writers)))
		}
		if etErr != nil {
			g.skip("etcd-cas", etErr.Error())
		} else {
			sides = append(sides, etcdCommitSide(cfg, "etcd-cas", et, ecli, writers, fmt.Sprintf("/bench/pg%d", writers)))
		}
		runRounds(ctx, cfg, g, cfg.rounds, sides)
	}

	// replica A → B
	pu, err := newVPPusher(ctx, cfg, a, "bench.pg.push")
	if err != nil {
		gRep.skip("A→B", err.Error())
		gRep.skip("A→A", err.Error())
		return
	}
	defer pu.a.close()
	gRep.Notes = append(gRep.Notes, "A→A: the same commits delivered to subscribers on replica A itself (the peer); A→B adds the notification (pg_notify on commit, LISTEN on B) and B's read of the head")
	repSide := func(name string, sub *vpServer) side {
		return side{name: name, run: func(ctx context.Context) (Stats, error) {
			sctx, cancel := context.WithCancel(ctx)
			set := newSubscriberSet(pgSubs)
			seqBase.Store(int64(pu.gen))
			startSSE(sctx, sub.base+"/watch?key=bench.pg.push", set)
			return pu.run(ctx, set, cancel)
		}}
	}
	runRounds(ctx, cfg, gRep, cfg.rounds, []side{repSide("A→B", b), repSide("A→A", a)})
}

// dropBenchDB drops database name (made by createBenchDB) through its
// admin connection, and closes that connection.
func dropBenchDB(admin *pgx.Conn, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
	logf("postgres: dropped database %s: %v", name, err)
	_ = admin.Close(ctx)
}

// createBenchDB creates database name on the server at adminURL with
// synchronous_commit on, and returns the admin connection (to drop it),
// the --store URL of the new database and the setting as the server
// reports it.
func createBenchDB(ctx context.Context, adminURL, name string) (*pgx.Conn, string, string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(cctx, adminURL)
	if err != nil {
		return nil, "", "", err
	}
	for _, sql := range []string{"CREATE DATABASE " + name, "ALTER DATABASE " + name + " SET synchronous_commit = on"} {
		if _, err := admin.Exec(cctx, sql); err != nil {
			_ = admin.Close(cctx)
			return nil, "", "", err
		}
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		_ = admin.Close(cctx)
		return nil, "", "", err
	}
	u.Path = "/" + name
	storeURL := u.String()
	var sc string
	probe, err := pgx.Connect(cctx, storeURL)
	if err == nil {
		err = probe.QueryRow(cctx, "SHOW synchronous_commit").Scan(&sc)
		_ = probe.Close(cctx)
	}
	if err != nil {
		_, _ = admin.Exec(cctx, "DROP DATABASE "+name)
		_ = admin.Close(cctx)
		return nil, "", "", err
	}
	return admin, storeURL, sc, nil
}

// withPGCPU adds the CPU PostgreSQL used during s's run: pg_cores and
// pg_cpu_us_per_op for the whole cluster (the postmaster of the admin
// connection's backend and all its children, other databases' sessions
// included; a backend that exits during the run is counted in the
// postmaster's reaped children's time), and pg_db_cpu_us_per_op for the
// backends connected to the bench database alone (the stores' pools and
// listeners, without the WAL writer and other shared processes), and
// pg_xacts_per_op, the database's committed transactions per commit.
func withPGCPU(admin *pgx.Conn, dbName string, s side) side {
	inner := s.run
	s.run = func(ctx context.Context) (Stats, error) {
		var backend int
		if err := admin.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
			return inner(ctx)
		}
		pm := procstat.Parent(backend)
		if pm <= 0 {
			return inner(ctx)
		}
		dbCPU := func() map[int]float64 {
			rows, err := admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = $1", dbName)
			if err != nil {
				return nil
			}
			pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			if err != nil {
				return nil
			}
			m := make(map[int]float64, len(pids))
			for _, p := range pids {
				m[int(p)] = cpuTimes(int(p))
			}
			return m
		}
		// Committed transactions of the database, as its backends last
		// reported them (at most once a second, so the count after the run
		// waits a little).
		xacts := func() (n float64) {
			_ = admin.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", dbName).Scan(&n)
			return n
		}
		x0 := xacts()
		d0 := dbCPU()
		c0, t0 := procstat.TreeCPU(pm), time.Now()
		st, err := inner(ctx)
		if err != nil || c0 < 0 {
			return st, err
		}
		c1, el := procstat.TreeCPU(pm), time.Since(t0).Seconds()
		d1 := dbCPU()
		time.Sleep(1100 * time.Millisecond) // backends report their statistics at most once a second
		x1 := xacts()
		if c1 < 0 {
			return st, nil
		}
		cores := (c1 - c0) / el
		if st.Extra == nil {
			st.Extra = map[string]float64{}
		}
		st.Extra["pg_cores"] = cores
		if st.Throughput > 0 {
			st.Extra["pg_cpu_us_per_op"] = cores / st.Throughput * 1e6
			var db float64
			for pid, c := range d1 {
				db += c - d0[pid] // a backend that started during the run counts from 0
			}
			st.Extra["pg_db_cpu_us_per_op"] = db / el / st.Throughput * 1e6
			if n := st.Throughput * el; n > 0 && x1 > x0 {
				st.Extra["pg_xacts_per_op"] = (x1 - x0) / n
			}
		}
		return st, nil
	}
	return s
}
