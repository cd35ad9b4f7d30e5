"""Backups of a running cluster (`raftbus backup create|verify|restore|create-key`): records of stream topics at their
offsets, topic settings, committed group offsets and queue messages, full or incremental, checked by SHA-256, and
optionally encrypted with a key file (AES-256-GCM).

An application of the SDK like the CLI: it may import any of the SDK, and the SDK never imports it.
Layout and guarantees: docs/operations.md ("Backups").
"""
from raftbus.client.backup.create import create_backup
from raftbus.client.backup.restore import restore_backup
from raftbus.client.backup.sealed import BackupKey, create_key_file
from raftbus.client.backup.verify import verify_backup

__all__ = ["BackupKey", "create_backup", "create_key_file", "restore_backup", "verify_backup"]
