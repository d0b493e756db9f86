"""The floor classifiers (:data:`CLASSIFIERS`), each fitted on the train part like a centre and stored as
arrays: ``"knn"``, scikit-learn's ``KNeighborsClassifier(weights="distance")`` rule computed as a
:class:`~models.centres.knn.KNNCentre` on one-hot labels (the same search, and in one request the same
distances, as a kNN centre on the same rows); ``"logistic"``, scikit-learn's ``LogisticRegression``
(multinomial), stored as its coefficients and evaluated in numpy."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from models._validation import lookup
from models.centres.knn import KNNCentre


class FloorClassifier(ABC):
    """What every floor classifier promises: class probabilities from standardised features, stored as arrays."""

    #: its name in :data:`CLASSIFIERS` and in a bundle
    name: str

    @abstractmethod
    def get_params(self) -> dict:
        """The hyperparameters.

        Returns
        -------
        dict
            What ``__init__`` takes, by name.
        """

    @abstractmethod
    def fit(self, X: np.ndarray, codes: np.ndarray, n_classes: int) -> "FloorClassifier":
        """Fit on the train part.

        Parameters
        ----------
        X : ndarray of shape (m, d)
            Standardised features of the training rows.
        codes : ndarray of shape (m,)
            Each row's class code, in ``0 .. n_classes - 1``.
        n_classes : int
            The classes of the whole survey (a class absent from these rows gets probability 0).

        Returns
        -------
        self : FloorClassifier
        """

    @abstractmethod
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities of checked rows.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n_classes)
            Each row sums to 1.
        """

    @abstractmethod
    def to_arrays(self) -> tuple[dict, dict]:
        """The fitted classifier in a bundle's form.

        Returns
        -------
        params : dict
            The hyperparameters and the class count.
        arrays : dict of str -> ndarray
            The fitted arrays.
        """

    @classmethod
    @abstractmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "FloorClassifier":
        """Rebuild a fitted classifier from what :meth:`to_arrays` gave.

        Parameters
        ----------
        params : dict
            The hyperparameters and the class count.
        arrays : dict of str -> ndarray
            The fitted arrays.

        Returns
        -------
        FloorClassifier
            Fitted.
        """


class KNNFloors(FloorClassifier):
    """Distance-weighted k-nearest-neighbour floor probabilities (scikit-learn's ``KNeighborsClassifier``
    rule, every row tied at the k-th distance included), as a :class:`KNNCentre` fitted on one-hot labels.

    Parameters
    ----------
    n_neighbors : int, default=5
        Neighbours weighed.
    """

    name = "knn"

    def __init__(self, n_neighbors: int = 5):
        self.n_neighbors = n_neighbors

    def get_params(self) -> dict:
        return {"n_neighbors": self.n_neighbors}

    def fit(self, X: np.ndarray, codes: np.ndarray, n_classes: int) -> "KNNFloors":
        self.n_classes_ = int(n_classes)
        self.knn_ = KNNCentre(n_neighbors=self.n_neighbors, weights="distance").fit(X, np.eye(n_classes)[codes])
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.knn_.predict(X)

    def to_arrays(self) -> tuple[dict, dict]:
        params, arrays = self.knn_.to_arrays()
        return {**self.get_params(), "n_classes": self.n_classes_}, arrays

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "KNNFloors":
        clf = cls(n_neighbors=int(params["n_neighbors"]))
        clf.n_classes_ = int(params["n_classes"])
        clf.knn_ = KNNCentre.from_arrays({"n_neighbors": clf.n_neighbors, "weights": "distance"}, arrays)
        return clf


class LogisticFloors(FloorClassifier):
    """Multinomial logistic regression (scikit-learn's ``LogisticRegression``), stored as its coefficients
    and evaluated as a softmax in numpy; a class absent from the training rows gets probability 0.

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularisation strength.
    max_iter : int, default=300
        The solver's iterations at most.
    """

    name = "logistic"

    def __init__(self, C: float = 1.0, max_iter: int = 300):
        self.C, self.max_iter = C, max_iter

    def get_params(self) -> dict:
        return {"C": self.C, "max_iter": self.max_iter}

    def fit(self, X: np.ndarray, codes: np.ndarray, n_classes: int) -> "LogisticFloors":
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        self.n_classes_ = int(n_classes)
        present = np.unique(codes)
        if present.size == 1:
            self.present_, self.coef_, self.intercept_ = present, np.zeros((1, X.shape[1])), np.zeros(1)
            return self
        with warnings.catch_warnings():  # the fit stops at max_iter: probabilities as good as its figures say
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = LogisticRegression(C=self.C, max_iter=self.max_iter).fit(X, codes)
        coef, intercept = model.coef_, model.intercept_
        if present.size == 2:  # scikit-learn's binary form: p(second) = sigmoid(w x + b) = softmax([0, w x + b])
            coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.array([0.0, intercept[0]])
        self.present_, self.coef_, self.intercept_ = model.classes_.astype(np.intp), coef, intercept
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        z = X @ self.coef_.T + self.intercept_
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        out = np.zeros((X.shape[0], self.n_classes_))
        out[:, self.present_] = z
        return out

    def to_arrays(self) -> tuple[dict, dict]:
        return ({**self.get_params(), "n_classes": self.n_classes_},
                {"present": self.present_, "coef": self.coef_, "intercept": self.intercept_})

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "LogisticFloors":
        clf = cls(C=float(params["C"]), max_iter=int(params["max_iter"]))
        clf.n_classes_ = int(params["n_classes"])
        clf.present_ = np.asarray(arrays["present"], dtype=np.intp)
        clf.coef_ = np.asarray(arrays["coef"], dtype=np.float64)
        clf.intercept_ = np.asarray(arrays["intercept"], dtype=np.float64)
        return clf


#: the floor classifiers by name (``lmve-train --floor-classifier``)
CLASSIFIERS = {"knn": KNNFloors, "logistic": LogisticFloors}


def make_classifier(name: str, **params):
    """A new floor classifier.

    Parameters
    ----------
    name : str
        One of :data:`CLASSIFIERS`.
    **params
        Its hyperparameters.

    Returns
    -------
    FloorClassifier

    Raises
    ------
    InputError
        ``name`` is none of them, naming ``floor_classifier``.
    """
    return lookup(CLASSIFIERS, name, "floor classifier", field="floor_classifier")(**params)
