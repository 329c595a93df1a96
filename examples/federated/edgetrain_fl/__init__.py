"""Federated learning on scikit-learn's digits with Flower: every client trains through the C
trainer edgetrain generates; the ServerApp aggregates with FedAvg or FedAdam."""
