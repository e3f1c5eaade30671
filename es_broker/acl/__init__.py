"""Access control: RocketMQ's plain ACL (accounts, signatures, white lists, perms)."""
