import time
from tests.rig.backends import only_backends
@only_backends("postgresql", "mariadb")
def test_sleep(db_url, mariadb_server, postgres_server):
    time.sleep(30)
