"""The same workloads through the official Python azure-data-tables SDK.

Run by `cargo xtask bench --with-python` in a venv under target/. Prints one JSON object.
"""
import base64
import datetime
import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from azure.data.tables import EdmType, EntityProperty, TableServiceClient

RUNS = 3


def record(i, pk, rk):
    hired = datetime.datetime(2014, 8, 22, 0, 50, 32, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=i)
    return {
        "PartitionKey": pk,
        "RowKey": rk,
        "Name": f"Employee {i:08}",
        "Email": f"employee{i:08}@contoso.com",
        "Age": 20 + i % 45,
        "Salary": EntityProperty(50_000_000_000 + i, EdmType.INT64),
        "Score": i / 7.0,
        "Active": i % 3 != 0,
        "Hired": hired,
        "Id": uuid.UUID(int=0x123456789ABCDEF0_0000000000000000 + i),
        "Code": bytes((b * i) % 256 for b in range(32)),
        "Notes": "n" * 230,
    }


def bulk(service, n, partitions, concurrency):
    rates = []
    for run in range(RUNS + 1):
        name = f"pybulk{run}{uuid.uuid4().hex[:12]}"
        table = service.create_table(name)
        chunks = {}
        for i in range(n):
            pk, rk = f"p{i % partitions:03}", f"{i:08}"
            chunks.setdefault(pk, []).append(("create", record(i, pk, rk)))
        batches = [ops[j:j + 100] for ops in chunks.values() for j in range(0, len(ops), 100)]
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(table.submit_transaction, batches))
        took = time.perf_counter() - start
        if run > 0:
            rates.append(n / took)
        service.delete_table(name)
    return rates


def scan(service, table_name, n):
    table = service.get_table_client(table_name)
    rates = []
    for run in range(RUNS + 1):
        start = time.perf_counter()
        count = sum(1 for _ in table.query_entities("PartitionKey eq 'scan'"))
        took = time.perf_counter() - start
        assert count == n, count
        if run > 0:
            rates.append(n / took)
    return rates


def points(service, table_name, n, reads):
    table = service.get_table_client(table_name)
    keys = [f"{(i * 7919) % n:08}" for i in range(reads)]
    seq, par = [], []
    for run in range(RUNS + 1):
        start = time.perf_counter()
        for rk in keys:
            table.get_entity("scan", rk)
        took = time.perf_counter() - start
        start = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda rk: table.get_entity("scan", rk), keys))
        took_par = time.perf_counter() - start
        if run > 0:
            seq.append(reads / took)
            par.append(reads / took_par)
    return seq, par


def main():
    connection_string, scan_table = sys.argv[1], sys.argv[2]
    sizes = json.loads(sys.argv[3])
    service = TableServiceClient.from_connection_string(connection_string)
    result = {"bulk": bulk(service, sizes["bulk"], sizes["bulk_partitions"], sizes["concurrency"])}
    result["scan"] = scan(service, scan_table, sizes["scan"])
    result["points_sequential"], result["points_parallel"] = points(service, scan_table, sizes["scan"], sizes["point_reads"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
