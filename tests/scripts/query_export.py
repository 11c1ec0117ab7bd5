"""Reads an `mlprof export --parquet DIR` with an existing engine and prints, per run, what
tests/tests/scale.rs compares with `mlprof summary --json`: calls per function name (events and
gpu_calls rows by name, spans rows by kind as itt_task, itt_marker, ...), ITT tasks and frames
per (domain, name), and the processes' pids, ranks and exit codes; with DuckDB also, under
"columns", each table's column names.

    python query_export.py duckdb|spark DIR
"""

import json
import sys


def duckdb_tables(root: str) -> dict:
    import duckdb

    con = duckdb.connect()

    def rows(sql: str) -> list:
        return con.execute(sql).fetchall()

    def source(table: str) -> str:
        return f"read_parquet('{root}/{table}/**/*.parquet', hive_partitioning=1, union_by_name=1)"

    out: dict = {}
    # The columns each table has as the engine sees it (partition columns included).
    for table in ("events", "spans", "gpu_calls", "processes", "files", "energy", "runs"):
        try:
            names = [r[0] for r in rows(f"describe select * from {source(table)}")]
        except duckdb.IOException:
            continue  # no run wrote this table
        out.setdefault("columns", {})[table] = names
    for run, name, n in rows(f"select run, name, count(*) from {source('events')} group by all"):
        out.setdefault(run, {}).setdefault("calls", {})[name] = n
    try:
        for run, name, n in rows(f"select run, name, count(*) from {source('gpu_calls')} group by all"):
            out.setdefault(run, {}).setdefault("calls", {})[name] = n
    except duckdb.IOException:
        pass  # no GPU call in any run: no file to read
    # ITT records count in the summary's calls by kind (itt_task, itt_marker, ...).
    for run, kind, n in rows(f"select run, kind, count(*) from {source('spans')} group by all"):
        out.setdefault(run, {}).setdefault("calls", {})[f"itt_{kind}"] = n
    spans = rows(
        f"select run, domain, name, count(*) from {source('spans')} "
        "where kind in ('task', 'frame') group by all"
    )
    for run, domain, name, n in spans:
        out.setdefault(run, {}).setdefault("spans", {})[f"{domain}\t{name}"] = n
    procs = rows(f"select run, pid, exec_index, rank, rank_role, exit_code, host from {source('processes')}")
    for run, pid, exec_index, rank, role, exit_code, host in procs:
        out.setdefault(run, {}).setdefault("processes", []).append(
            {
                "pid": pid,
                "exec_index": exec_index,
                "rank": rank,
                "rank_role": role,
                "exit_code": exit_code,
                "host": host,
            }
        )
    # Every events partition's rank is the rank of the processes whose events it holds.
    for run, rank, pids in rows(f"select run, rank, list(distinct pid) from {source('events')} group by all"):
        out.setdefault(run, {}).setdefault("event_ranks", {})[str(rank)] = sorted(pids)
    return out


def spark_tables(root: str) -> dict:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("mlprof-export-check")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    out: dict = {}
    try:
        for table in ("events", "gpu_calls"):
            try:
                df = spark.read.parquet(f"{root}/{table}")
            except Exception:  # no such table in any run (Spark raises AnalysisException)
                continue
            for r in df.groupBy("run", "name").count().collect():
                out.setdefault(r["run"], {}).setdefault("calls", {})[r["name"]] = r["count"]
        all_spans = spark.read.parquet(f"{root}/spans")
        for r in all_spans.groupBy("run", "kind").count().collect():
            out.setdefault(r["run"], {}).setdefault("calls", {})[f"itt_{r['kind']}"] = r["count"]
        spans = all_spans.where("kind in ('task', 'frame')")
        for r in spans.groupBy("run", "domain", "name").count().collect():
            out.setdefault(r["run"], {}).setdefault("spans", {})[f"{r['domain']}\t{r['name']}"] = r["count"]
        procs = spark.read.parquet(f"{root}/processes")
        for r in procs.collect():
            out.setdefault(r["run"], {}).setdefault("processes", []).append(
                {
                    "pid": r["pid"],
                    "exec_index": r["exec_index"],
                    "rank": r["rank"],
                    "rank_role": r["rank_role"],
                    "exit_code": r["exit_code"],
                    "host": r["host"],
                }
            )
    finally:
        spark.stop()
    return out


def main() -> None:
    engine, root = sys.argv[1], sys.argv[2]
    result = duckdb_tables(root) if engine == "duckdb" else spark_tables(root)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
