"""Run by the image build before the push (components/buildspec.yml): the server's drivers import,
MLflow's basic-auth app loads (it needs Flask-WTF) and SQLAlchemy finds PostgreSQL's driver."""

import boto3
import mlflow
import psycopg2
import sqlalchemy
from mlflow.server import auth

sqlalchemy.create_engine("postgresql://user:password@localhost/db")  # loads the dialect, no connection
print("mlflow", mlflow.__version__, "boto3", boto3.__version__, "psycopg2", psycopg2.__version__)
print("basic-auth app", auth.create_app.__module__)
