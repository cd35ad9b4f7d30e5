"""The Kafka APIs the Kafka port serves, one module per API (or family), and the router that lists them."""
