"""What agents import: sign and send receipts; check busguard's attestations."""
