"""The demo job and the ``syncpace demo`` pipeline."""
