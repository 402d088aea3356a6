"""busguard-config-update: the `config.update` kind (busguard_config_update.kind)."""
