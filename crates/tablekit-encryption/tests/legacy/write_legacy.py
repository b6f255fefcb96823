"""Writes entities encrypted by the legacy Python table client (azure-cosmosdb-table 1.0.6)
into a table, for tablekit-encryption's compatibility test, and checks that the library reads
each one back to the plaintext it was given.

Usage: python write_legacy.py <connection string> <table> <spec.json>

The spec (written by tests/legacy.rs):
    {"aes": {"kid": ..., "key_hex": ...}, "rsa": {"kid": ..., "pem_path": ...},
     "entities": [{"kek": "aes" | "rsa", "java_v1": bool, "encrypt": [names],
                   "properties": {"PartitionKey": ..., "RowKey": ..., ...}}]}

`java_v1` entities are written the way the library's reader recognises Java's first release:
property IVs from PartitionKey + RowKey + name, the name list as `[a, b]`, and a
KeyWrappingMetadata naming a Java library. The library itself reads every entity back before
this script reports success.
"""

import json
import sys

from azure.cosmosdb.table import _encryption as encryption
from azure.cosmosdb.table.tableservice import TableService
from cryptography.hazmat.primitives.asymmetric.padding import MGF1, OAEP
from cryptography.hazmat.primitives.hashes import SHA1
from cryptography.hazmat.primitives.keywrap import aes_key_unwrap, aes_key_wrap
from cryptography.hazmat.primitives.serialization import load_pem_private_key


class AesKeyWrapper:
    """A key-encryption key with the library's interface: AES key wrap (RFC 3394)."""

    def __init__(self, kid, key):
        self.kid = kid
        self.key = key

    def wrap_key(self, key):
        return aes_key_wrap(self.key, key)

    def unwrap_key(self, key, algorithm):
        if algorithm != "A256KW":
            raise ValueError("unknown key wrap algorithm " + algorithm)
        return aes_key_unwrap(self.key, key)

    def get_key_wrap_algorithm(self):
        return "A256KW"

    def get_kid(self):
        return self.kid


class RsaKeyWrapper:
    """A key-encryption key with the library's interface: RSA-OAEP with SHA-1."""

    def __init__(self, kid, private_key):
        self.kid = kid
        self.private_key = private_key

    def _padding(self):
        return OAEP(mgf=MGF1(algorithm=SHA1()), algorithm=SHA1(), label=None)

    def wrap_key(self, key):
        return self.private_key.public_key().encrypt(key, self._padding())

    def unwrap_key(self, key, algorithm):
        if algorithm != "RSA-OAEP":
            raise ValueError("unknown key wrap algorithm " + algorithm)
        return self.private_key.decrypt(key, self._padding())

    def get_key_wrap_algorithm(self):
        return "RSA-OAEP"

    def get_kid(self):
        return self.kid


class JavaV1:
    """Makes the library's writer produce Java's first-release variant while active."""

    def __enter__(self):
        self.saved = (
            encryption._generate_property_iv,
            encryption.dumps,
            encryption._generate_encryption_data_dict,
        )
        iv, dumps, data = self.saved

        def java_iv(entity_iv, pk, rk, name, _is_java_v1):
            return iv(entity_iv, pk, rk, name, True)

        def java_dumps(value):
            if isinstance(value, list):
                return "[" + ", ".join(value) + "]"
            return dumps(value)

        def java_data(kek, cek, entity_iv):
            result = data(kek, cek, entity_iv)
            result["KeyWrappingMetadata"] = {"EncryptionLibrary": "Java 4.0.0"}
            return result

        encryption._generate_property_iv = java_iv
        encryption.dumps = java_dumps
        encryption._generate_encryption_data_dict = java_data
        return self

    def __exit__(self, *_):
        (
            encryption._generate_property_iv,
            encryption.dumps,
            encryption._generate_encryption_data_dict,
        ) = self.saved


def main():
    connection_string, table, spec_path = sys.argv[1:4]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    with open(spec["rsa"]["pem_path"], "rb") as f:
        rsa = load_pem_private_key(f.read(), password=None)
    keys = {
        "aes": AesKeyWrapper(spec["aes"]["kid"], bytes.fromhex(spec["aes"]["key_hex"])),
        "rsa": RsaKeyWrapper(spec["rsa"]["kid"], rsa),
    }
    by_id = {k.get_kid(): k for k in keys.values()}

    for item in spec["entities"]:
        writer = TableService(connection_string=connection_string)
        writer.key_encryption_key = keys[item["kek"]]
        names = set(item["encrypt"])
        writer.encryption_resolver_function = lambda pk, rk, name, names=names: name in names
        entity = item["properties"]
        if item["java_v1"]:
            with JavaV1():
                writer.insert_entity(table, entity)
        else:
            writer.insert_entity(table, entity)

        reader = TableService(connection_string=connection_string)
        reader.key_resolver_function = by_id.get
        reader.require_encryption = True
        read = reader.get_entity(table, entity["PartitionKey"], entity["RowKey"])
        for name, value in entity.items():
            if read[name] != value:
                raise SystemExit("library read back %s wrongly: %r" % (name, read[name]))
    print(json.dumps({"written": len(spec["entities"])}))


if __name__ == "__main__":
    main()
